package ticks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/sinks/objstore"
)

// Supervisor watches job heartbeats and rebuilds lost job state. It never
// writes job state itself: it sends stall and bootstrap commands on the
// tasks topic, and the owner of the job's partition applies them (so the
// owner stays the only writer). It is safe for concurrent use.
type Supervisor struct {
	cfg   Config
	coord *Coordinator
	store objstore.Store
	log   *slog.Logger
	ready atomic.Bool
}

// NewSupervisor returns a supervisor sending commands through coord.
func NewSupervisor(cfg Config, coord *Coordinator, store objstore.Store, log *slog.Logger) *Supervisor {
	if log == nil {
		log = slog.Default()
	}
	return &Supervisor{cfg: cfg.withDefaults(), coord: coord, store: store, log: log.With("service", "ticks-supervisor")}
}

// Name implements pipelines.Service.
func (s *Supervisor) Name() string { return "ticks-supervisor" }

// Ready implements pipelines.Service: true once the first scan finished.
func (s *Supervisor) Ready() bool { return s.ready.Load() }

// Run bootstraps once when configured, then scans for stalled jobs every
// Supervisor.Interval until ctx is cancelled. Scan errors are logged and
// retried at the next interval.
func (s *Supervisor) Run(ctx context.Context) error {
	if s.cfg.Supervisor.BootstrapOnStart {
		if rep, err := s.Bootstrap(ctx); err != nil {
			s.log.Error("bootstrap failed", "err", err, "rebuilt", rep.Rebuilt, "failed", rep.Failed)
		} else {
			s.log.Info("bootstrap done", "rebuilt", rep.Rebuilt, "gaps", rep.Gaps)
		}
	}
	t := time.NewTicker(s.cfg.Supervisor.Interval)
	defer t.Stop()
	for {
		if _, err := s.ScanStalls(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("stall scan failed", "err", err)
		} else {
			s.ready.Store(true)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ScanStalls reads every job state and sends a stall command for each
// RUNNING or PENDING job whose heartbeat is older than StallAfter; it
// returns the job keys it reported.
func (s *Supervisor) ScanStalls(ctx context.Context) ([]string, error) {
	all, err := ReadJobs(ctx, s.coord.kopts, s.cfg.JobsTopic, nil)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	var keys []string
	for _, st := range Flatten(all) {
		if st.Status != StatusRunning && st.Status != StatusPending {
			continue
		}
		age := now.Sub(time.UnixMilli(st.HeartbeatAt))
		if age <= s.cfg.Supervisor.StallAfter {
			continue
		}
		t := Task{Kind: KindStall, Symbol: st.Symbol, Date: st.Date, JobInstanceID: st.JobInstanceID,
			AccountID: st.AccountID, HeartbeatAt: st.HeartbeatAt, Retrigger: s.cfg.Supervisor.Retrigger}
		if _, err := s.coord.send(ctx, t); err != nil {
			return keys, err
		}
		s.log.Warn("job heartbeat too old", "job", st.JobKey, "age", age.Round(time.Second), "retrigger", t.Retrigger)
		keys = append(keys, st.JobKey)
	}
	sort.Strings(keys)
	return keys, nil
}

// BootstrapReport says what Bootstrap did.
type BootstrapReport struct {
	// Rebuilt lists the job keys whose state was rebuilt.
	Rebuilt []string
	// Gaps is the number of backfill tasks sent.
	Gaps int
	// Unreadable lists segment files that could not be read.
	Unreadable []string
	// Failed lists the job keys that could not be rebuilt (their segment
	// files could not be listed, or the source refused their trading
	// hours); Bootstrap's error says why.
	Failed []string
}

// Bootstrap rebuilds the state of every job that has segment files in the
// object store but no state in the jobs topic: the instance of the file
// with the latest range becomes the job's instance, the end of the covered
// ranges its cursor, and every hole between the session start and the
// cursor becomes a backfill task (backfill=true: it never moves the
// cursor). Files whose ranges overlap others (two instances over the same
// ticks) count once: the chosen instance's are kept, the others are
// listed in the command as redundant and deleted by the owner. The
// rebuilt state is sent as a bootstrap command; the owner applies it only
// if it still has no state for the job.
//
// A job that cannot be rebuilt does not stop the others: it is listed in
// the report's Failed and its error is part of the returned one. Reading
// the jobs topic, listing the store or sending a command fails the run.
func (s *Supervisor) Bootstrap(ctx context.Context) (BootstrapReport, error) {
	var rep BootstrapReport
	var failed []error
	all, err := ReadJobs(ctx, s.coord.kopts, s.cfg.JobsTopic, nil)
	if err != nil {
		return rep, err
	}
	have := Flatten(all)
	infos, err := s.store.List(ctx, "ticks/")
	if err != nil {
		return rep, fmt.Errorf("list segment files: %w", err)
	}
	jobs := map[string]bool{}
	for _, in := range infos {
		if n, err := ParseSegmentKey(in.Key); err == nil {
			jobs[JobKey(n.Symbol, n.Date)] = true
		}
	}
	keys := make([]string, 0, len(jobs))
	for k := range jobs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if have[key] != nil {
			continue
		}
		symbol, date, err := SplitJobKey(key)
		if err != nil {
			continue
		}
		st, gaps, redundant, bad, err := s.rebuild(ctx, symbol, date)
		rep.Unreadable = append(rep.Unreadable, bad...)
		if err != nil {
			if ctx.Err() != nil {
				return rep, err
			}
			s.log.Error("job state not rebuilt", "job", key, "err", err)
			rep.Failed = append(rep.Failed, key)
			failed = append(failed, fmt.Errorf("%s: %w", key, err))
			continue
		}
		if st == nil {
			continue
		}
		t := Task{Kind: KindBootstrap, Symbol: symbol, Date: date, JobInstanceID: st.JobInstanceID, AccountID: st.AccountID, State: st, Gaps: gaps, Redundant: redundant}
		if _, err := s.coord.send(ctx, t); err != nil {
			return rep, err
		}
		s.log.Info("job state rebuilt", "job", key, "instance", st.JobInstanceID, "cursor", st.Cursor, "status", st.Status, "gaps", gaps, "redundant", len(redundant))
		rep.Rebuilt = append(rep.Rebuilt, key)
		rep.Gaps += len(gaps)
	}
	if len(failed) > 0 {
		return rep, fmt.Errorf("bootstrap: %d job(s) not rebuilt: %w", len(failed), errors.Join(failed...))
	}
	return rep, nil
}

// rebuild derives a job's state, its gaps and its redundant files (see
// resolveOverlaps) from its segment files.
func (s *Supervisor) rebuild(ctx context.Context, symbol, date string) (*JobState, [][2]int64, []string, []string, error) {
	segs, bad, err := ListSegments(ctx, s.store, symbol, date)
	if err != nil || len(segs) == 0 {
		return nil, nil, nil, bad, err
	}
	sess, err := s.cfg.Source.TradingHours(ctx, symbol, date)
	if err != nil {
		return nil, nil, nil, bad, fmt.Errorf("trading hours of %s on %s: %w", symbol, date, err)
	}
	latest := segs[0]
	for _, sg := range segs {
		if sg.RangeStart >= latest.RangeStart {
			latest = sg
		}
	}
	kept, redundant := resolveOverlaps(segs, latest.Instance)
	covered := sess.Start - 1
	var gaps [][2]int64
	var ticks int64
	for _, sg := range kept {
		if sg.RangeStart > covered+1 {
			gaps = append(gaps, [2]int64{covered + 1, sg.RangeStart - 1})
		}
		covered = max(covered, sg.RangeEnd)
		ticks += sg.Rows
	}
	now := s.cfg.Now().UnixMilli()
	st := &JobState{
		JobKey: JobKey(symbol, date), Symbol: symbol, Date: date, AccountID: latest.Account,
		Status: StatusRunning, JobInstanceID: latest.Instance, Cursor: covered,
		StartTime: sess.Start, EndTime: sess.End, HeartbeatAt: now, CriticalRanges: sess.CriticalRanges,
		Segments: len(kept), Ticks: ticks, Origin: "bootstrap", CreatedAt: now,
	}
	if strings.TrimSpace(st.AccountID) == "" {
		st.AccountID = s.cfg.DefaultAccount
	}
	if covered >= sess.End {
		st.Cursor, st.Status = sess.End, StatusCompleted
	}
	return st, gaps, redundant, bad, nil
}

// resolveOverlaps picks the segment files whose ranges do not overlap:
// first every file of the chosen instance (the one the job is rebuilt
// with; the seed trusts its files), then the others by range start, each
// only if it overlaps none picked before. The rest are redundant — their
// ticks are in picked files or, for a part that is not, in a gap that is
// backfilled — and are returned to be deleted, since keeping them would
// duplicate ticks. kept is sorted by range start.
func resolveOverlaps(segs []Segment, chosen string) (kept []Segment, redundant []string) {
	overlaps := func(sg Segment) bool {
		for _, k := range kept {
			if sg.RangeStart <= k.RangeEnd && k.RangeStart <= sg.RangeEnd {
				return true
			}
		}
		return false
	}
	for _, pass := range []bool{true, false} {
		for _, sg := range segs {
			if (sg.Instance == chosen) != pass {
				continue
			}
			if overlaps(sg) {
				redundant = append(redundant, sg.Key)
				continue
			}
			kept = append(kept, sg)
		}
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].RangeStart < kept[j].RangeStart })
	return kept, redundant
}
