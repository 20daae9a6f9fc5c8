package smap

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/progress"
	"github.com/sluicehq/sluice/stages/run"
)

// data.collected is produced by the collector's runtime in the transaction
// that commits the project.created offset: when those transactions abort
// (refused transactional offset commits, a failed end), their
// announcements are aborted with them, so a read_committed reader (the
// analytics service, this test) sees each item announced exactly once,
// every announcement transactional, and the project completes once with
// exact counts.
func TestDataCollectedExactlyOnceAcrossAbortedCommits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testkit.NewPostgresServer(t), harnessOpts{fakeKafka: true})
	faults := testkit.InjectTxnFaults(h.k, h.cfg.CollectorGroup, 2)
	h.start(h.cfg)
	const n = 60
	for i := range 3 {
		h.createProject(ProjectCreated{ProjectID: fmt.Sprintf("p-ann-%d", i), Keywords: []string{"VF3"},
			Targets: []Target{synthetic("tiktok", 10), synthetic("youtube", 10)}})
	}
	for i := range 3 {
		st := h.waitDone(fmt.Sprintf("p-ann-%d", i), 60*time.Second)
		if st.Total != 20 || st.Done != 20 || st.Errors != 0 {
			t.Fatalf("project %d final state %+v, want total = done = 20", i, st)
		}
	}
	if !faults.Injected() {
		t.Fatalf("faults not injected: %d transactional offset commits, %d failed ends", faults.OffsetCommits.Load(), faults.FailedEnds.Load())
	}
	h.requireOncePerItem(h.cfg.DataCollectedTopic, n, func(v []byte) (string, error) {
		e, err := DecodeDataCollected(v)
		return e.Payload.ItemID, err
	})
	for i := range 3 {
		if cs := h.completions(fmt.Sprintf("p-ann-%d", i)); len(cs) != 1 {
			t.Errorf("project %d: %d completions, want 1", i, len(cs))
		}
	}
}

// announced returns the item ids of outs.
func announced(outs []collected) map[string]bool {
	got := map[string]bool{}
	for _, o := range outs {
		got[o.item] = true
	}
	return got
}

// originOf is the stages.HeaderOrigin header redrive puts on a record
// first dead-lettered from s.
func originOf(s stages.Source) stages.Header {
	return stages.Header{Key: stages.HeaderOrigin, Value: []byte(stages.Origin(s.Topic, s.Partition, s.Offset))}
}

// items returns the ids of the items s0 … s(n-1) of project on platform.
func items(project, platform string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = ItemID(project, platform, fmt.Sprintf("s%d", i))
	}
	return ids
}

// emitN emits the items s0 … s(n-1).
func emitN(emit func(Item) error, n int) error {
	for i := range n {
		if err := emit(Item{SourceID: fmt.Sprintf("s%d", i)}); err != nil {
			return err
		}
	}
	return nil
}

// The record that sealed a project, delivered again (the transaction that
// was to commit its offset with the announcements aborted), announces the
// sealed items again from the crawl journal without crawling — whatever a
// new crawl would find (here: one item fewer, the target failing) — and
// the total stays. A duplicate project.created (another record) of the
// sealed project announces nothing, nor does its dead letter re-driven; the
// sealing record re-driven from the DLQ announces them again once, and
// becomes the sealing record.
func TestCollectorAnnouncesSealedItemsAgainOnRedelivery(t *testing.T) {
	t.Parallel()
	d := newCollectorDeps(t)
	crawls := 0
	cr := crawlerFunc(func(_ context.Context, _ ProjectCreated, _ Target, emit func(Item) error) error {
		crawls++
		if crawls > 1 {
			_ = emitN(emit, 2)
			return errors.New("page 2: HTTP 404")
		}
		return emitN(emit, 3)
	})
	col, reg := d.collector(t, cr, run.RetryPolicy{MaxAttempts: 1})
	p := ProjectCreated{ProjectID: "p-sealed", Targets: []Target{{Platform: "tiktok"}}}
	src := stages.Source{Topic: "pc", Partition: 2, Offset: 40}
	deliver := func(src stages.Source, headers ...stages.Header) map[string]bool {
		t.Helper()
		m := stages.Msg[Event[ProjectCreated]]{Key: p.ProjectID, Value: NewProjectCreated(p, time.Now()), Headers: headers,
			Source: src, Attempt: 1, MaxAttempts: 30}
		outs, err := col.stage(testkit.Context(t), m)
		if err != nil {
			t.Fatal(err)
		}
		return announced(outs)
	}
	want := items(p.ProjectID, "tiktok", 3)
	check := func(what string, got map[string]bool) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s announced %d items, want the %d sealed ones", what, len(got), len(want))
		}
		for _, it := range want {
			if !got[it] {
				t.Errorf("%s: sealed item %s not announced", what, it)
			}
		}
	}
	check("first crawl", deliver(src))
	check("redelivery", deliver(src))
	if crawls != 1 {
		t.Errorf("%d crawls, want 1 (a sealed project is not crawled again)", crawls)
	}
	st, err := col.tr.Get(testkit.Context(t), p.ProjectID)
	if err != nil || !st.Sealed || st.Total != 3 {
		t.Errorf("state %+v (%v), want sealed with total 3", st, err)
	}
	dup := src
	dup.Offset++
	if got := deliver(dup); len(got) != 0 {
		t.Errorf("a duplicate project.created announced %d items, want none", len(got))
	}
	if got := deliver(stages.Source{Topic: "pc", Partition: 2, Offset: 90}, originOf(dup)); len(got) != 0 {
		t.Errorf("the duplicate's dead letter re-driven announced %d items, want none", len(got))
	}
	redriven := stages.Source{Topic: "pc", Partition: 2, Offset: 91}
	check("sealing record re-driven", deliver(redriven, originOf(src)))
	if got := deliver(stages.Source{Topic: "pc", Partition: 2, Offset: 92}, originOf(src)); len(got) != 0 {
		t.Errorf("the sealing record re-driven a second time announced %d items, want none", len(got))
	}
	check("re-driven record delivered again", deliver(redriven, originOf(src)))
	if v := testkit.Metric(t, reg, "smap_projects_total", "outcome", "reannounced"); v != 3 {
		t.Errorf("smap_projects_total{outcome=reannounced} = %v, want 3", v)
	}
	if v := testkit.Metric(t, reg, "smap_projects_total", "outcome", "resealed"); v != 3 {
		t.Errorf("smap_projects_total{outcome=resealed} = %v, want 3", v)
	}
}

// A crawl cut before the seal (a revoke, a kill -9) leaves items in the
// journal and the total; the next crawl finds fewer (the listing changed).
// The seal counts the items of both crawls and announces every one of
// them: the total equals the announcements.
func TestCollectorAnnouncesItemsOfAnInterruptedCrawl(t *testing.T) {
	t.Parallel()
	d := newCollectorDeps(t)
	crawls := 0
	cr := crawlerFunc(func(_ context.Context, _ ProjectCreated, tg Target, emit func(Item) error) error {
		if tg.Platform == "a" {
			return emitN(emit, 3)
		}
		crawls++
		if crawls == 1 {
			return fmt.Errorf("crawl cut: %w", stages.ErrStopped)
		}
		return nil
	})
	col, _ := d.collector(t, cr, run.RetryPolicy{MaxAttempts: 1})
	p := ProjectCreated{ProjectID: "p-cut", Targets: []Target{{Platform: "a"}, {Platform: "b"}}}
	m := stages.Msg[Event[ProjectCreated]]{Key: p.ProjectID, Value: NewProjectCreated(p, time.Now()),
		Source: stages.Source{Topic: "pc", Offset: 9}, Attempt: 1, MaxAttempts: 30}
	if _, err := col.stage(testkit.Context(t), m); !errors.Is(err, stages.ErrStopped) {
		t.Fatalf("first delivery: %v, want ErrStopped", err)
	}
	if st, _ := col.tr.Get(testkit.Context(t), p.ProjectID); st.Total != 3 || st.Sealed {
		t.Fatalf("after the cut: %+v, want 3 items counted, not sealed", st)
	}
	// The next owner: target a now yields nothing new, b nothing.
	cr2 := crawlerFunc(func(context.Context, ProjectCreated, Target, func(Item) error) error { return nil })
	col.cfg.Crawler = cr2
	outs, err := col.stage(testkit.Context(t), m)
	if err != nil {
		t.Fatal(err)
	}
	st, err := col.tr.Get(testkit.Context(t), p.ProjectID)
	if err != nil || !st.Sealed || st.Total != 3 || len(outs) != 3 {
		t.Fatalf("sealed %+v (%v) with %d announcements, want total = announcements = 3", st, err, len(outs))
	}
}

// Redis lost the project after its seal and rebuild-progress restored it
// (sealed total 3, one item analysed); the sealing record comes again: it
// announces the journal's three items, none beyond, so the completion waits
// for every one of them.
func TestCollectorReannouncesNoItemBeyondTheTotalAfterRebuild(t *testing.T) {
	t.Parallel()
	d := newCollectorDeps(t)
	crawls := 0
	cr := crawlerFunc(func(_ context.Context, _ ProjectCreated, _ Target, emit func(Item) error) error {
		crawls++
		return emitN(emit, 3+crawls-1) // a second crawl would find s3 too
	})
	col, _ := d.collector(t, cr, run.RetryPolicy{MaxAttempts: 1})
	ctx := testkit.Context(t)
	p := ProjectCreated{ProjectID: "p-rebuilt", Targets: []Target{{Platform: "tiktok"}}}
	src := stages.Source{Topic: "pc", Offset: 3}
	if _, outs, err := attemptsAt(t, col, p, src, 30); err != nil || len(outs) != 3 {
		t.Fatalf("first crawl: %d announcements (%v), want 3", len(outs), err)
	}
	ids := items(p.ProjectID, "tiktok", 4)
	if _, err := col.tr.Rebuild(ctx, p.ProjectID, progress.Snapshot{Items: map[string]bool{ids[0]: false}, Total: 3, Sealed: true}); err != nil {
		t.Fatal(err)
	}
	_, outs, err := attemptsAt(t, col, p, src, 30)
	if err != nil {
		t.Fatal(err)
	}
	got := announced(outs)
	if len(got) != 3 || got[ids[3]] {
		t.Fatalf("after the rebuild the sealing record announced %v, want s0–s2", got)
	}
	for _, it := range ids[1:3] {
		dec, err := col.tr.Count(ctx, p.ProjectID, it, false)
		if err != nil {
			t.Fatal(err)
		}
		if it != ids[2] && dec.Publish {
			t.Errorf("completion decided (%d/%d) with a sealed item not analysed", dec.Done, dec.Total)
		}
		if it == ids[2] && !dec.Publish {
			t.Errorf("completion not decided at %d/%d", dec.Done, dec.Total)
		}
	}
}

// lostReply fails the reply of the armed-th script call from the time it
// is armed (set to n > 0): the script ran in Redis, the caller sees an
// error (a timeout after the write).
type lostReply struct{ armed *atomic.Int32 }

func (lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && h.armed.Load() > 0 && h.armed.Add(-1) == 0 {
			err = errors.New("i/o timeout (reply lost)")
			cmd.SetErr(err)
		}
		return err
	}
}
func (lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The seal's reply is lost on the record's last attempt: the runtime
// dead-letters project.created with the project sealed and none of its
// items announced. Re-driving the dead letter (another offset, the redrive
// count header) announces them.
func TestCollectorRedrivenSealingRecordAnnouncesItsItems(t *testing.T) {
	t.Parallel()
	d := newCollectorDeps(t)
	var armed atomic.Int32
	d.rdb.Client.AddHook(lostReply{&armed})
	cr := crawlerFunc(func(_ context.Context, _ ProjectCreated, _ Target, emit func(Item) error) error {
		err := emitN(emit, 3)
		armed.Store(2) // the scripts that follow: the discovery of the items, then the seal
		return err
	})
	col, _ := d.collector(t, cr, run.RetryPolicy{MaxAttempts: 1})
	p := ProjectCreated{ProjectID: "p-redrive", Targets: []Target{{Platform: "tiktok"}}}
	m := stages.Msg[Event[ProjectCreated]]{Key: p.ProjectID, Value: NewProjectCreated(p, time.Now()),
		Source: stages.Source{Topic: "pc", Offset: 5}, Attempt: 1, MaxAttempts: 1}
	if _, err := col.stage(testkit.Context(t), m); err == nil {
		t.Fatal("the lost reply did not fail the last attempt")
	}
	st, err := col.tr.Get(testkit.Context(t), p.ProjectID)
	if err != nil || !st.Sealed || st.Total != 3 {
		t.Fatalf("after the dead letter: %+v (%v), want sealed at 3", st, err)
	}
	m.Headers = []stages.Header{{Key: stages.HeaderRedriveCount, Value: []byte("1")},
		originOf(m.Source)}
	m.Source.Offset, m.Attempt, m.MaxAttempts = 77, 1, 30
	outs, err := col.stage(testkit.Context(t), m)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 3 {
		t.Errorf("the re-driven project.created announced %d items, want the 3 sealed ones", len(outs))
	}
}
