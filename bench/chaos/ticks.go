package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/sluicehq/sluice/bench/internal/faults"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/topics"
)

// ticksLoad is ticks' part of a scenario: jobs (symbol × date) triggered at
// once, each on its own account so that the Redis limiter (1 s: 2, 1 min:
// 20, 10 min: 60 per account) paces every job separately; a job is one
// session of the default synthetic source (6 h 30 min, a tick per second
// on average: 24 segments of at most 1 000 ticks). What the input implies:
// per job, segment files under ticks/SYMBOL/DATE/ that hold exactly the
// source's ticks of the session (none missing, none twice, same values),
// with contiguous ranges (no gap, no overlap); every job COMPLETED in
// ingest.jobs; no dead letter on ingest.dlq. ticks keeps nothing in
// PostgreSQL: its faults are kill, redis (the limiter) and broker (the
// jobs changelog).
type ticksLoad struct {
	jobs []ticksJob
	src  *ticks.Synthetic
}

type ticksJob struct{ symbol, date, account string }

func newTicksLoad(cfg *config) *ticksLoad {
	l := &ticksLoad{src: ticks.NewSynthetic(ticks.SyntheticConfig{})}
	symbols := []string{"NQ", "ES", "CL", "GC", "YM", "RTY"}
	n := max(1, int(24*cfg.scale))
	for i := range n {
		l.jobs = append(l.jobs, ticksJob{symbol: symbols[i%len(symbols)], date: fmt.Sprintf("2025-10-%02d", 1+i/len(symbols))})
	}
	return l
}

func (l *ticksLoad) pipeline() string { return "ticks" }
func (l *ticksLoad) sent() int        { return len(l.jobs) }
func (l *ticksLoad) unit() string     { return "ticks" }

func (l *ticksLoad) groups() map[string][]string {
	return map[string][]string{"ticks": {topics.IngestTasks}}
}

func (l *ticksLoad) config(sc *scene) ticks.Config {
	return ticks.Config{TasksTopic: sc.topic(topics.IngestTasks), JobsTopic: sc.topic(topics.IngestJobs), Source: l.src}
}

func (l *ticksLoad) setup(ctx context.Context, sc *scene) error {
	coord := ticks.NewCoordinator(sc.cl, sc.kopts, l.config(sc))
	for i := range l.jobs {
		// The limiter's windows are per account: a scenario's own accounts
		// start empty whatever ran before.
		j := &l.jobs[i]
		j.account = fmt.Sprintf("%s-%03d", sc.id, i)
		if _, err := coord.Trigger(ctx, ticks.TriggerRequest{Symbol: j.symbol, Date: j.date, AccountID: j.account}); err != nil {
			return fmt.Errorf("trigger %s %s: %w", j.symbol, j.date, err)
		}
	}
	return nil
}

// progress is the source ticks at or before the jobs' cursors (in files),
// plus one per COMPLETED job.
func (l *ticksLoad) progress(ctx context.Context, sc *scene) (done, want int64, err error) {
	states, err := ticks.ReadJobs(ctx, sc.kopts, sc.topic(topics.IngestJobs), nil)
	if err != nil {
		return 0, 0, err
	}
	byKey := ticks.Flatten(states)
	for _, j := range l.jobs {
		all, err := l.src.Ticks(j.symbol, j.date)
		if err != nil {
			return 0, 0, err
		}
		want += int64(len(all)) + 1
		st := byKey[ticks.JobKey(j.symbol, j.date)]
		if st == nil {
			continue
		}
		done += int64(sort.Search(len(all), func(i int) bool { return all[i].TimeMs > st.Cursor }))
		if st.Status == ticks.StatusCompleted {
			done++
		}
	}
	return done, want, nil
}

func (l *ticksLoad) verify(ctx context.Context, sc *scene, r *result) error {
	tk := effect{kind: "ticks in files"}
	files := effect{kind: "segment files"}
	jobs := effect{kind: "jobs COMPLETED", want: int64(len(l.jobs))}
	states, err := ticks.ReadJobs(ctx, sc.kopts, sc.topic(topics.IngestJobs), nil)
	if err != nil {
		return fmt.Errorf("ingest.jobs: %w", err)
	}
	byKey := ticks.Flatten(states)
	for _, j := range l.jobs {
		key := ticks.JobKey(j.symbol, j.date)
		want, err := l.src.Ticks(j.symbol, j.date)
		if err != nil {
			return err
		}
		sess, err := l.src.TradingHours(ctx, j.symbol, j.date)
		if err != nil {
			return err
		}
		got, segs, err := ticks.ReadTicks(ctx, sc.objects, j.symbol, j.date)
		if err != nil {
			return fmt.Errorf("segments of %s: %w", key, err)
		}
		// Ticks, by their millisecond (each tick has its own).
		tk.want += int64(len(want))
		tk.got += int64(len(got))
		wantAt := make(map[int64]ticks.Tick, len(want))
		for _, t := range want {
			wantAt[t.TimeMs] = t
		}
		seen := make(map[int64]bool, len(got))
		for _, t := range got {
			w, ok := wantAt[t.TimeMs]
			switch {
			case seen[t.TimeMs] || !ok:
				tk.dup++
			case w != t:
				r.note("%s: tick at %d is %+v, want %+v", key, t.TimeMs, t, w)
				tk.lost++
			}
			seen[t.TimeMs] = true
		}
		for _, t := range want {
			if !seen[t.TimeMs] {
				tk.lost++
			}
		}
		// Files: contiguous ranges from the session start.
		files.got += int64(len(segs))
		files.want += int64((len(want) + 999) / 1000)
		next := sess.Start
		for _, s := range segs {
			switch {
			case s.RangeStart < next:
				files.dup++
				r.note("%s: segment %s starts at %d, before %d (overlap)", key, s.Key, s.RangeStart, next)
			case s.RangeStart > next:
				files.lost++
				r.note("%s: segment %s starts at %d, after %d (gap)", key, s.Key, s.RangeStart, next)
			}
			next = max(next, s.RangeEnd+1)
		}
		st := byKey[key]
		switch {
		case st == nil:
			r.note("%s: no job state", key)
		case st.Status != ticks.StatusCompleted:
			r.note("%s: job %s (%s %s)", key, st.Status, st.LastErrorType, st.LastError)
		default:
			jobs.got++
		}
	}
	jobs.lost = jobs.want - jobs.got
	// A file count off by the segment arithmetic (a last empty range
	// writes no file) is a lost or extra file only when the ticks say so.
	if files.got != files.want && files.lost == 0 && files.dup == 0 {
		r.note("segment files %d, want %d", files.got, files.want)
		if files.got > files.want {
			files.dup = files.got - files.want
		} else {
			files.lost = files.want - files.got
		}
	}
	r.add(tk)
	r.add(files)
	r.add(jobs)

	dl := effect{kind: "dead letters"}
	records, distinct, err := faults.DLQCoordinates(ctx, sc.adm, sc.kopts, sc.topic(topics.IngestDLQ))
	if err != nil {
		return err
	}
	dl.got, dl.dup = int64(records), int64(records-distinct)
	r.add(dl)
	return nil
}
