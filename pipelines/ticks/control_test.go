package ticks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/ticks"
)

// produceAt writes records to the partitions set on them (a test plays the
// part of a crashed member's leftovers: a task log and the state it wrote).
func (f *fixture) produceAt(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	cl := f.k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(testkit.Context(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// stateJSON encodes st with extra fields set (e.g. chain_offset), written
// as a worker would have written them.
func stateJSON(t *testing.T, st ticks.JobState, extra map[string]any) []byte {
	t.Helper()
	v, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(v, &m); err != nil {
		t.Fatal(err)
	}
	for k, x := range extra {
		m[k] = x
	}
	v, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// segmentStarts counts the segment tasks on the tasks topic after offset
// `after`, by start.
func (f *fixture) segmentStarts(t *testing.T, after int64) map[int64]int {
	t.Helper()
	n := map[int64]int{}
	for _, r := range f.k.ReadTopic(t, f.cfg.TasksTopic) {
		var task ticks.Task
		if r.Offset <= after || json.Unmarshal(r.Value, &task) != nil || (task.Kind != "" && task.Kind != ticks.KindSegment) {
			continue
		}
		n[task.StartTs]++
	}
	return n
}

// A crash right after a segment file was written (before the files it
// replaces were deleted and before the cursor moved) leaves the new file
// and another instance's file over the same range. The redelivered task
// reuses its file without fetching, and must still delete the other
// instance's file: otherwise its ticks stay duplicated in the covered range.
func TestReusedSegmentStillReplacesForeignFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	ctx := testkit.Context(t)
	sess, _ := f.src.TradingHours(ctx, "NG", testDate)
	inst, old := uuid.NewString(), uuid.NewString()
	first, err := f.src.HistoricalTicks(ctx, "NG", sess.Start, sess.End, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := ticks.WriteSegmentForTest(ctx, f.store, "NG", testDate, old, "U1", sess.Start, first[59].TimeMs, false, first[:60]); err != nil {
		t.Fatal(err)
	}
	if err := ticks.WriteSegmentForTest(ctx, f.store, "NG", testDate, inst, "U1", sess.Start, first[len(first)-1].TimeMs, false, first); err != nil {
		t.Fatal(err)
	}
	f.startWorker(t)
	key := "NG:" + testDate
	f.produceAt(t, &kgo.Record{Topic: f.cfg.TasksTopic, Partition: 0, Key: []byte(key), Value: taskJSON(t, ticks.Task{
		Kind: ticks.KindTrigger, JobKey: key, Symbol: "NG", Date: testDate, JobInstanceID: inst, AccountID: "U1", StartTime: sess.Start, EndTime: sess.End})})
	f.waitJob(t, key, 60*time.Second, "COMPLETED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusCompleted })
	f.checkExact(t, "NG", 0)
	if _, err := f.store.Get(ctx, ticks.SegmentKey("NG", testDate, sess.Start, old)); err == nil {
		t.Error("the other instance's file over the reused segment's range is still there")
	}
}

// The known issue "a redelivered segment re-sends its successor": when the
// successor was not lost, the re-sent copy must be dropped without sending
// a successor of its own. Otherwise every later segment is chained twice
// (a second live chain of the same instance, one more per crash) until the
// job completes. Here the log holds a segment task that already moved the
// cursor (its redelivery) followed by a second copy of it.
func TestRedeliveredSegmentDoesNotStartSecondChain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	ctx := testkit.Context(t)
	sess, _ := f.src.TradingHours(ctx, "RTY", testDate)
	inst := uuid.NewString()
	first, err := f.src.HistoricalTicks(ctx, "RTY", sess.Start, sess.End, 100)
	if err != nil {
		t.Fatal(err)
	}
	last := first[len(first)-1].TimeMs
	if err := ticks.WriteSegmentForTest(ctx, f.store, "RTY", testDate, inst, "U1", sess.Start, last, false, first); err != nil {
		t.Fatal(err)
	}
	key := "RTY:" + testDate
	trig := ticks.Task{Kind: ticks.KindTrigger, JobKey: key, Symbol: "RTY", Date: testDate, JobInstanceID: inst, AccountID: "U1", StartTime: sess.Start, EndTime: sess.End}
	seg := ticks.Task{Kind: ticks.KindSegment, JobKey: key, Symbol: "RTY", Date: testDate, JobInstanceID: inst, AccountID: "U1", StartTs: sess.Start}
	st := ticks.JobState{JobKey: key, Symbol: "RTY", Date: testDate, AccountID: "U1", Status: ticks.StatusRunning, JobInstanceID: inst,
		Cursor: last, StartTime: sess.Start, EndTime: sess.End, HeartbeatAt: time.Now().UnixMilli(), LastStart: sess.Start,
		Segments: 1, Ticks: int64(len(first)), Origin: "trigger"}
	f.produceAt(t,
		&kgo.Record{Topic: f.cfg.TasksTopic, Partition: 0, Key: []byte(key), Value: taskJSON(t, trig)}, // offset 0
		&kgo.Record{Topic: f.cfg.TasksTopic, Partition: 0, Key: []byte(key), Value: taskJSON(t, seg)},  // offset 1: moved the cursor
		&kgo.Record{Topic: f.cfg.TasksTopic, Partition: 0, Key: []byte(key), Value: taskJSON(t, seg)},  // offset 2: a copy
		&kgo.Record{Topic: f.cfg.JobsTopic, Partition: 0, Key: []byte(key), Value: stateJSON(t, st, map[string]any{"chain_offset": 1})},
	)
	f.startWorker(t)
	final := f.waitJob(t, key, 60*time.Second, "COMPLETED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusCompleted })
	segs := f.checkExact(t, "RTY", 0)
	if final.Segments != len(segs) || final.JobInstanceID != inst {
		t.Errorf("final state %+v, want %d segments of %s", final, len(segs), inst)
	}
	for start, n := range f.segmentStarts(t, 2) {
		if n > 1 {
			t.Errorf("segment %d was chained %d times, want once", start, n)
		}
	}
}

// A trigger redelivered after its state was written but with its first
// segment task lost (the crash hit between the two produces) must send
// that task again; dropping the redelivery as a duplicate left the job
// PENDING until the supervisor declared it STALLED.
func TestRedeliveredTriggerResendsLostFirstSegment(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	ctx := testkit.Context(t)
	sess, _ := f.src.TradingHours(ctx, "RB", testDate)
	inst := uuid.NewString()
	key := "RB:" + testDate
	trig := ticks.Task{Kind: ticks.KindTrigger, JobKey: key, Symbol: "RB", Date: testDate, JobInstanceID: inst, AccountID: "U1", StartTime: sess.Start, EndTime: sess.End}
	st := ticks.JobState{JobKey: key, Symbol: "RB", Date: testDate, AccountID: "U1", Status: ticks.StatusPending, JobInstanceID: inst,
		Cursor: sess.Start - 1, StartTime: sess.Start, EndTime: sess.End, HeartbeatAt: time.Now().UnixMilli(), Origin: "trigger"}
	f.produceAt(t,
		&kgo.Record{Topic: f.cfg.TasksTopic, Partition: 0, Key: []byte(key), Value: taskJSON(t, trig)},
		&kgo.Record{Topic: f.cfg.JobsTopic, Partition: 0, Key: []byte(key), Value: stateJSON(t, st, map[string]any{"chain_offset": 0})},
	)
	f.startWorker(t)
	f.waitJob(t, key, 30*time.Second, "COMPLETED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusCompleted })
	f.checkExact(t, "RB", 0)
}

// badPageSource corrupts the pages after the first: it repeats the
// previous segment's last tick in front of the page (a duplicate at the
// boundary, outside the requested range) or swaps its first two ticks.
type badPageSource struct {
	ticks.Source
	sessionStart int64
	swap         bool
}

func (s *badPageSource) HistoricalTicks(ctx context.Context, symbol string, startMs, endMs int64, max int) ([]ticks.Tick, error) {
	out, err := s.Source.HistoricalTicks(ctx, symbol, startMs, endMs, max)
	if err != nil || startMs == s.sessionStart || len(out) < 2 {
		return out, err
	}
	if s.swap {
		out[0], out[1] = out[1], out[0]
		return out, nil
	}
	prev, err := s.Source.HistoricalTicks(ctx, symbol, s.sessionStart, startMs-1, 1000)
	if err != nil || len(prev) == 0 {
		return out, err
	}
	return append([]ticks.Tick{prev[len(prev)-1]}, out[:len(out)-1]...), nil
}

// A page holding a tick outside the requested range, or ticks out of time
// order, is a source error: the job fails and nothing of that page is
// written (it used to be written when only its last tick was in range,
// duplicating the boundary tick in the files).
func TestSourcePageOutsideRangeOrOrderFailsJob(t *testing.T) {
	t.Parallel()
	for name, swap := range map[string]bool{"boundary_duplicate": false, "out_of_order": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var src *badPageSource
			f := newFixture(t, ticks.SyntheticConfig{}, func(c *ticks.Config) {
				sess, _ := c.Source.TradingHours(context.Background(), "PL", testDate)
				src = &badPageSource{Source: c.Source, sessionStart: sess.Start, swap: swap}
				c.Source = src
			})
			f.startWorker(t)
			res := f.trigger(t, "PL")
			st := f.waitJob(t, res.JobKey, 30*time.Second, "FAILED", func(s *ticks.JobState) bool {
				return s.Status == ticks.StatusFailed || s.Status == ticks.StatusCompleted
			})
			if st.Status != ticks.StatusFailed || st.LastErrorType != ticks.ErrTypeUnknown || st.Segments != 1 {
				t.Errorf("job ended %s (%s, %d segments); want FAILED with UNKNOWN after the first segment", st.Status, st.LastErrorType, st.Segments)
			}
			got, segs, err := ticks.ReadTicks(testkit.Context(t), f.store, "PL", testDate)
			if err != nil {
				t.Fatal(err)
			}
			if len(segs) != 1 {
				t.Errorf("%d segment files, want only the first", len(segs))
			}
			for i := 1; i < len(got); i++ {
				if got[i].TimeMs <= got[i-1].TimeMs {
					t.Fatalf("files hold tick %d at %d after one at %d", i, got[i].TimeMs, got[i-1].TimeMs)
				}
			}
		})
	}
}

// Bootstrap after the state topic lost a job whose files hold a gap and a
// second instance's file over ticks another file holds too (a crash
// between its write and the deletion of the files it replaces): the
// rebuilt job counts those ticks once, the redundant file is deleted, the
// gap is backfilled, and the files end up exact. The second instance's
// file lies inside the range (the first instance stays the job's) or at
// the latest start (its instance becomes the job's and finishes it).
func TestBootstrapResolvesOverlappingInstances(t *testing.T) {
	t.Parallel()
	for name, atEnd := range map[string]bool{"inside": false, "latest": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, ticks.SyntheticConfig{}, nil)
			stop := f.startWorker(t)
			res := f.trigger(t, "HO")
			f.waitJob(t, res.JobKey, 60*time.Second, "COMPLETED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusCompleted })
			stop()
			segs := f.checkExact(t, "HO", 0)
			ctx := testkit.Context(t)
			gap := segs[len(segs)/2]
			if err := f.store.Delete(ctx, gap.Key); err != nil {
				t.Fatal(err)
			}
			// Inside: over a file's first half. Latest: from the last file's
			// second tick on, which turns the range of its first tick into a
			// second gap.
			over, wantGaps := segs[2], 1
			if atEnd {
				over, wantGaps = segs[len(segs)-1], 2
			}
			rows, err := f.src.HistoricalTicks(ctx, "HO", over.RangeStart, over.RangeEnd, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if atEnd {
				rows = rows[1:]
			}
			rows = rows[:len(rows)/2]
			from := rows[0].TimeMs
			other := uuid.NewString()
			if err := ticks.WriteSegmentForTest(ctx, f.store, "HO", testDate, other, "U1", from, rows[len(rows)-1].TimeMs, false, rows); err != nil {
				t.Fatal(err)
			}
			f.produceAt(t, &kgo.Record{Topic: f.cfg.JobsTopic, Partition: res.Partition, Key: []byte(res.JobKey)}) // tombstone
			if st := f.job(t, res.JobKey); st != nil {
				t.Fatalf("state still there after the tombstone: %+v", st)
			}
			f.startWorker(t)
			rep, err := ticks.NewSupervisor(f.cfg, f.coord, f.store, testLogger(t)).Bootstrap(ctx)
			if err != nil || len(rep.Rebuilt) != 1 || rep.Gaps != wantGaps {
				t.Fatalf("bootstrap %+v, %v; want one job with %d gap(s)", rep, err, wantGaps)
			}
			want := res.JobInstanceID
			if atEnd {
				want = other
			}
			st := f.waitJob(t, res.JobKey, 60*time.Second, "COMPLETED with the gap backfilled", func(s *ticks.JobState) bool {
				return s.Status == ticks.StatusCompleted && s.Backfills >= 1
			})
			f.checkExact(t, "HO", 0)
			if st.JobInstanceID != want {
				t.Errorf("rebuilt job runs instance %s, want %s", st.JobInstanceID, want)
			}
			if !atEnd {
				if _, err := f.store.Get(ctx, ticks.SegmentKey("HO", testDate, from, other)); err == nil {
					t.Error("the redundant file of the other instance is still there")
				}
				if all := mustTicks(t, f, "HO"); st.Ticks != int64(len(all))-gap.Rows {
					t.Errorf("rebuilt state counts %d ticks, want %d (the files' ticks once, without the gap)", st.Ticks, int64(len(all))-gap.Rows)
				}
			}
		})
	}
}

// A crash before two triggers of a job were committed redelivers both;
// the older one must not bring its replaced instance back (state flipping
// to it, and its chain starting again) before the newer one replaces it
// once more.
func TestRedeliveredOlderTriggerDoesNotResurrect(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	ctx := testkit.Context(t)
	sess, _ := f.src.TradingHours(ctx, "KC", testDate)
	key := "KC:" + testDate
	a, b := uuid.NewString(), uuid.NewString()
	trig := func(inst string) []byte {
		return taskJSON(t, ticks.Task{Kind: ticks.KindTrigger, JobKey: key, Symbol: "KC", Date: testDate, JobInstanceID: inst, AccountID: "U1", StartTime: sess.Start, EndTime: sess.End})
	}
	st := ticks.JobState{JobKey: key, Symbol: "KC", Date: testDate, AccountID: "U1", Status: ticks.StatusPending, JobInstanceID: b,
		Cursor: sess.Start - 1, StartTime: sess.Start, EndTime: sess.End, HeartbeatAt: time.Now().UnixMilli(), Origin: "trigger"}
	f.produceAt(t,
		&kgo.Record{Topic: f.cfg.TasksTopic, Partition: 0, Key: []byte(key), Value: trig(a)}, // offset 0
		&kgo.Record{Topic: f.cfg.TasksTopic, Partition: 0, Key: []byte(key), Value: trig(b)}, // offset 1, applied
		&kgo.Record{Topic: f.cfg.JobsTopic, Partition: 0, Key: []byte(key), Value: stateJSON(t, st, map[string]any{"chain_offset": 1})},
	)
	f.startWorker(t)
	f.waitJob(t, key, 60*time.Second, "COMPLETED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusCompleted })
	f.checkExact(t, "KC", 0)
	for _, r := range f.k.ReadTopic(t, f.cfg.JobsTopic) {
		if s := decodeState(t, r); s.JobInstanceID != b {
			t.Errorf("state of instance %s written (%s), want only %s", s.JobInstanceID, s.Status, b)
		}
	}
}

// hoursFailing refuses the trading hours of one symbol.
type hoursFailing struct {
	ticks.Source
	symbol string
}

func (h hoursFailing) TradingHours(ctx context.Context, symbol, date string) (ticks.Session, error) {
	if symbol == h.symbol {
		return ticks.Session{}, &ticks.SourceError{Type: ticks.ErrTypeNoContract, Err: errors.New("no such contract")}
	}
	return h.Source.TradingHours(ctx, symbol, date)
}

// A job whose trading hours the source refuses does not stop the bootstrap
// of the others: it is reported as failed and the rest are rebuilt.
func TestBootstrapContinuesPastAFailedJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	ctx := testkit.Context(t)
	for _, sym := range []string{"AAA", "ZZZ"} {
		sess, err := f.src.TradingHours(ctx, sym, testDate)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := f.src.HistoricalTicks(ctx, sym, sess.Start, sess.End, 100)
		if err != nil {
			t.Fatal(err)
		}
		if err := ticks.WriteSegmentForTest(ctx, f.store, sym, testDate, uuid.NewString(), "U1", sess.Start, rows[len(rows)-1].TimeMs, false, rows); err != nil {
			t.Fatal(err)
		}
	}
	cfg := f.cfg
	cfg.Source = hoursFailing{Source: f.src, symbol: "AAA"}
	rep, err := ticks.NewSupervisor(cfg, f.coord, f.store, testLogger(t)).Bootstrap(ctx)
	bad, good := ticks.JobKey("AAA", testDate), ticks.JobKey("ZZZ", testDate)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "no such contract") {
		t.Errorf("bootstrap error %v, want one naming %s and the source's refusal", err, bad)
	}
	if fmt.Sprint(rep.Rebuilt) != "["+good+"]" || fmt.Sprint(rep.Failed) != "["+bad+"]" || rep.Gaps != 0 {
		t.Fatalf("bootstrap report %+v, want %s rebuilt and %s failed", rep, good, bad)
	}
	var sent []string
	for _, r := range f.k.ReadTopic(t, f.cfg.TasksTopic) {
		sent = append(sent, string(r.Key))
	}
	if fmt.Sprint(sent) != "["+good+"]" {
		t.Errorf("commands sent for %v, want one bootstrap command for %s", sent, good)
	}
}
