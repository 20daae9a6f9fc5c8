package progress_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/progress"
)

func newTracker(t *testing.T) (*progress.Tracker, *testkit.Redis) {
	t.Helper()
	r := testkit.NewRedis(t, testkit.WithRedisDB(1), testkit.FakeOK())
	t.Logf("redis: %s", r)
	tr, err := progress.New(r.Client, progress.Config{Prefix: r.Prefix + "job:", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return tr, r
}

// must returns v or panics with err (which fails the test); for the main
// test goroutine only.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestLifecycleChickenAndEgg(t *testing.T) {
	t.Parallel()
	tr, r := newTracker(t)
	ctx := testkit.Context(t)
	st := must(tr.Init(ctx, "p1"))
	if st.Status != progress.StatusInitializing || st.Total != 0 {
		t.Fatalf("after init: %+v", st)
	}
	ttl := must(r.Client.PTTL(ctx, tr.Key("p1")).Result())
	if ttl <= 0 || ttl > time.Hour {
		t.Fatalf("ttl = %v, want ≤ 1h and > 0", ttl)
	}
	st = must(tr.Start(ctx, "p1"))
	if st.Status != progress.StatusCrawling {
		t.Fatalf("after start: %+v", st)
	}
	// Ten items found; the same ones found again do not grow the total.
	for range 2 {
		d := must(tr.Discover(ctx, "p1", "a", "b", "c", "d", "e"))
		if d.Total != 5 {
			t.Fatalf("total = %d, want 5", d.Total)
		}
	}
	must(tr.Discover(ctx, "p1", "f", "g", "h", "i", "j"))
	// Analytics catches up with the collector: done = total, not sealed.
	for _, it := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		d := must(tr.Count(ctx, "p1", it, it == "c"))
		if d.Publish {
			t.Fatalf("completion decided before the seal at item %s: %+v", it, d)
		}
	}
	// Redelivered items change nothing.
	d := must(tr.Count(ctx, "p1", "c", true))
	if d.Counted || d.Done != 10 || d.Errors != 1 || d.Publish {
		t.Fatalf("duplicate count: %+v", d)
	}
	// More items appear, then the collector seals.
	must(tr.Discover(ctx, "p1", "k", "l"))
	d = must(tr.Seal(ctx, "p1", 12))
	if d.Publish || d.Status != progress.StatusProcessingWait || d.Total != 12 || !d.Sealed {
		t.Fatalf("seal with 2 items left: %+v", d)
	}
	// Discoveries after the seal do not change the total.
	d = must(tr.Discover(ctx, "p1", "zzz"))
	if d.Total != 12 {
		t.Fatalf("total after seal grew to %d", d.Total)
	}
	must(tr.Count(ctx, "p1", "k", false))
	d = must(tr.Count(ctx, "p1", "l", false))
	if !d.Publish || d.Repeat || d.Done != 12 || d.Errors != 1 || !d.Pending {
		t.Fatalf("last item: %+v, want a first completion decision", d)
	}
	// A redelivery before MarkDone re-asks for the publish (crash recovery).
	d = must(tr.Count(ctx, "p1", "l", false))
	if !d.Publish || !d.Repeat || d.Counted {
		t.Fatalf("redelivery while pending: %+v, want a repeated decision", d)
	}
	d = must(tr.Seal(ctx, "p1", 12))
	if !d.Publish || !d.Repeat {
		t.Fatalf("seal while pending: %+v, want a repeated decision", d)
	}
	st = must(tr.MarkDone(ctx, "p1"))
	if st.Status != progress.StatusDone || st.Pending || st.CompletedAt.IsZero() {
		t.Fatalf("after mark done: %+v", st)
	}
	// DONE is final: nothing asks for another publish.
	for _, d := range []progress.Decision{
		must(tr.Count(ctx, "p1", "l", false)),
		must(tr.Count(ctx, "p1", "new", false)),
		must(tr.Seal(ctx, "p1", 12)),
	} {
		if d.Publish || d.Status != progress.StatusDone {
			t.Fatalf("after done: %+v", d)
		}
	}
	got := must(tr.Get(ctx, "p1"))
	if got.Percent() != 100 || got.Status != progress.StatusDone {
		t.Fatalf("get: %+v percent %v", got, got.Percent())
	}
	for _, k := range []string{tr.Key("p1") + ":items", tr.Key("p1") + ":found"} {
		if ttl := must(r.Client.PTTL(ctx, k).Result()); ttl <= 0 {
			t.Errorf("%s has no TTL (%v)", k, ttl)
		}
	}
}

func TestSealAfterEverythingCountedDecides(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t)
	ctx := testkit.Context(t)
	must(tr.Init(ctx, "p"))
	must(tr.Discover(ctx, "p", "x", "y"))
	must(tr.Count(ctx, "p", "x", false))
	must(tr.Count(ctx, "p", "y", false))
	d := must(tr.Seal(ctx, "p", 2))
	if !d.Publish || d.Repeat {
		t.Fatalf("seal of a finished job: %+v, want a completion decision", d)
	}
	// An empty job completes at its seal.
	must(tr.Init(ctx, "empty"))
	d = must(tr.Seal(ctx, "empty", 0))
	if !d.Publish || d.Percent() != 0 {
		t.Fatalf("empty job: %+v", d)
	}
}

func TestMissingState(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t)
	ctx := testkit.Context(t)
	if _, err := tr.Count(ctx, "nope", "i", false); !errors.Is(err, progress.ErrMissing) {
		t.Fatalf("count on missing job: %v, want ErrMissing", err)
	}
	if _, err := tr.MarkDone(ctx, "nope"); !errors.Is(err, progress.ErrMissing) {
		t.Fatalf("mark done on missing job: %v, want ErrMissing", err)
	}
	st := must(tr.Get(ctx, "nope"))
	if st.Status != progress.StatusNotFound {
		t.Fatalf("get missing: %+v", st)
	}
}

// Many workers counting overlapping items concurrently, with the seal in
// the middle, produce exact counts and exactly one first decision.
func TestConcurrentCountingDecidesOnce(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t)
	ctx := testkit.Context(t)
	const n, workers = 400, 8
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf("item-%03d", i)
	}
	must(tr.Init(ctx, "p"))
	must(tr.Discover(ctx, "p", items...))
	var decisions, repeats atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each worker counts every item (as if every record were
			// delivered to every worker), starting at a different place.
			for i := range n {
				it := items[(i+w*50)%n]
				d, err := tr.Count(ctx, "p", it, (i+w*50)%n%10 == 0)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Publish && !d.Repeat {
					decisions.Add(1)
				} else if d.Publish {
					repeats.Add(1)
				}
			}
		}()
	}
	d := must(tr.Seal(ctx, "p", n))
	if d.Publish && !d.Repeat {
		decisions.Add(1)
	}
	wg.Wait()
	st := must(tr.Get(ctx, "p"))
	if st.Done != n || st.Errors != n/10 || st.Total != n {
		t.Fatalf("state %+v, want done=%d errors=%d total=%d", st, n, n/10, n)
	}
	if got := decisions.Load(); got != 1 {
		t.Fatalf("%d first completion decisions, want 1 (repeats %d)", got, repeats.Load())
	}
}

func TestRebuild(t *testing.T) {
	t.Parallel()
	tr, r := newTracker(t)
	ctx := testkit.Context(t)
	items := map[string]bool{}
	for i := range 9000 { // more than one SADD chunk
		items[fmt.Sprintf("i%d", i)] = i%100 == 0
	}
	cases := []struct {
		name      string
		snap      progress.Snapshot
		status    string
		total     int64
		publish   bool
		countNext bool // counting a new item afterwards decides
	}{
		{"crawling", progress.Snapshot{Items: items, Total: 9500}, progress.StatusCrawling, 9500, false, false},
		{"sealed-open", progress.Snapshot{Items: items, Total: 9001, Sealed: true}, progress.StatusProcessingWait, 9001, false, true},
		{"sealed-complete", progress.Snapshot{Items: items, Total: 9000, Sealed: true}, progress.StatusProcessingWait, 9000, true, false},
		{"done", progress.Snapshot{Items: items, Total: 9000, Sealed: true, CompletedAt: time.Now()}, progress.StatusDone, 9000, false, false},
	}
	for _, c := range cases {
		id := "rb-" + c.name
		// Stale state that the rebuild must replace.
		must(tr.Init(ctx, id))
		must(tr.Count(ctx, id, "stale", true))
		d := must(tr.Rebuild(ctx, id, c.snap))
		if d.Status != c.status || d.Total != c.total || d.Done != 9000 || d.Errors != 90 || d.Publish != c.publish {
			t.Errorf("%s: rebuilt %+v", c.name, d)
		}
		// Items in the snapshot are not counted again.
		d = must(tr.Count(ctx, id, "i5", false))
		if d.Counted || d.Done != 9000 {
			t.Errorf("%s: recount of a rebuilt item: %+v", c.name, d)
		}
		if c.countNext {
			d = must(tr.Count(ctx, id, "last", false))
			if !d.Publish || d.Done != 9001 {
				t.Errorf("%s: last item after rebuild: %+v", c.name, d)
			}
		}
		if ttl := must(r.Client.PTTL(ctx, tr.Key(id)+":items").Result()); ttl <= 0 {
			t.Errorf("%s: items set without TTL", c.name)
		}
	}
}

type msg = stages.Msg[string]

func TestStageAndSink(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t)
	ctx := testkit.Context(t)
	must(tr.Init(ctx, "p"))
	must(tr.Discover(ctx, "p", "a", "b"))
	must(tr.Seal(ctx, "p", 2))
	stage := progress.Stage(tr, func(m msg) (progress.Item, error) {
		if m.Value == "bad" {
			return progress.Item{}, stages.DeadLetter(stages.ReasonDecodeError, "", errors.New("bad"))
		}
		return progress.Item{Job: m.Key, ID: m.Value, Failed: m.Value == "b"}, nil
	}, 10*time.Millisecond)

	if _, err := stage(ctx, msg{Key: "p", Value: "bad"}); stages.Classify(err).Kind != stages.KindDeadLetter {
		t.Fatalf("bad item: %v", err)
	}
	if _, err := stage(ctx, msg{Key: "missing", Value: "a"}); stages.Classify(err).Kind != stages.KindRetry || !errors.Is(err, progress.ErrMissing) {
		t.Fatalf("missing job: %v, want a retry of ErrMissing", err)
	}
	var batch []progress.Completion
	for _, v := range []string{"a", "b", "b", "a"} {
		cs, err := stage(ctx, msg{Key: "p", Value: v})
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, cs...)
	}
	// b decides and the redelivered b re-decides while pending; the
	// duplicate of a (not the deciding item) does not.
	if len(batch) != 2 || batch[0].Repeat || !batch[1].Repeat {
		t.Fatalf("completions %+v", batch)
	}
	var published []string
	fail := true
	sink := progress.NewSink(tr, func(_ context.Context, cs []progress.Completion) error {
		if fail {
			fail = false
			return errors.New("broker down")
		}
		for _, c := range cs {
			published = append(published, fmt.Sprintf("%s:%d/%d/%d", c.ID, c.Done, c.Total, c.Errors))
		}
		return nil
	})
	if err := sink.Write(ctx, batch); err == nil {
		t.Fatal("failed publish reported success")
	}
	if st := must(tr.Get(ctx, "p")); st.Status == progress.StatusDone || !st.Pending {
		t.Fatalf("marked done although the publish failed: %+v", st)
	}
	if err := sink.Write(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if len(published) != 1 || published[0] != "p:2/2/1" {
		t.Fatalf("published %v, want one completion p:2/2/1", published)
	}
	if st := must(tr.Get(ctx, "p")); st.Status != progress.StatusDone || st.Pending {
		t.Fatalf("after publish: %+v", st)
	}
	cs, err := stage(ctx, msg{Key: "p", Value: "a"})
	if err != nil || len(cs) != 0 {
		t.Fatalf("after done: %v %v", cs, err)
	}
}

// failHook fails every command while down is set, as a Redis that went
// away would.
type failHook struct{ down *atomic.Bool }

func (h failHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h failHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.down.Load() {
			return errors.New("connection refused")
		}
		return next(ctx, cmd)
	}
}
func (h failHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.down.Load() {
			return errors.New("connection refused")
		}
		return next(ctx, cmds)
	}
}

// Redis goes away after a completion was published, before it is marked
// done: the runtime's retries of the batch mark it done once Redis is back
// and do not publish it again (make chaos's smap:redis found one
// job.completed per failed attempt).
func TestSinkRetryAfterMarkDoneFailedDoesNotRepublish(t *testing.T) {
	t.Parallel()
	tr, r := newTracker(t)
	ctx := testkit.Context(t)
	d := decideOneItemJob(t, tr, "p")
	// The sink's tracker talks to the same Redis through a client that can
	// be cut off.
	var down atomic.Bool
	rc := redis.NewClient(r.Client.Options())
	rc.AddHook(failHook{&down})
	t.Cleanup(func() { _ = rc.Close() })
	str, err := progress.New(rc, progress.Config{Prefix: r.Prefix + "job:", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	published := 0
	sink := progress.NewSink(str, func(_ context.Context, cs []progress.Completion) error {
		published += len(cs)
		down.Store(true) // Redis goes away once the event is acknowledged
		return nil
	})
	batch := []progress.Completion{{State: d.State}}
	for attempt := range 3 {
		if err := sink.Write(ctx, batch); err == nil {
			t.Fatalf("attempt %d: MarkDone on a Redis that is down reported success", attempt)
		}
	}
	down.Store(false)
	if err := sink.Write(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if published != 1 {
		t.Fatalf("published %d times, want once", published)
	}
	if st := must(tr.Get(ctx, "p")); st.Status != progress.StatusDone || st.Pending {
		t.Fatalf("after the retry: %+v", st)
	}
}

// A failing WithAfterDone hook fails the batch, and the retries run only the
// hook again: the completion is neither published nor marked done twice,
// and the hook sees the marked state every time.
func TestSinkRetriesFailedAfterDoneHookOnly(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t)
	ctx := testkit.Context(t)
	d := decideOneItemJob(t, tr, "p")
	published, hooked, failures := 0, 0, 2
	var hookStates []progress.State
	sink := progress.NewSink(tr, func(_ context.Context, cs []progress.Completion) error {
		published += len(cs)
		return nil
	}, progress.WithAfterDone(func(_ context.Context, cs []progress.Completion) error {
		hooked++
		for _, c := range cs {
			hookStates = append(hookStates, c.State)
		}
		if failures > 0 {
			failures--
			return errors.New("object store down")
		}
		return nil
	}))
	batch := []progress.Completion{{State: d.State}}
	for attempt := range 2 {
		if err := sink.Write(ctx, batch); err == nil {
			t.Fatalf("attempt %d: a failed hook reported success", attempt)
		}
	}
	if err := sink.Write(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if published != 1 || hooked != 3 {
		t.Fatalf("published %d times, hook ran %d times; want 1 and 3", published, hooked)
	}
	for i, st := range hookStates {
		if st.Status != progress.StatusDone {
			t.Errorf("hook call %d saw status %q, want the marked state", i, st.Status)
		}
	}
	// A later batch with the same job is a new completion decision: once
	// the hook succeeded nothing of the job is kept.
	if err := sink.Write(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if hooked != 4 {
		t.Fatalf("hook ran %d times after a new batch, want 4", hooked)
	}
}

// decideOneItemJob starts job id with one item, seals and counts it, and
// returns the completion decision.
func decideOneItemJob(t *testing.T, tr *progress.Tracker, id string) progress.Decision {
	t.Helper()
	ctx := testkit.Context(t)
	must(tr.Init(ctx, id))
	must(tr.Discover(ctx, id, "a"))
	must(tr.Seal(ctx, id, 1))
	d := must(tr.Count(ctx, id, "a", false))
	if !d.Publish {
		t.Fatalf("counting the only item decided nothing: %+v", d)
	}
	return d
}

// SealExact seals at the caller's count even when more items were
// discovered; Seal takes the larger. A later seal of either kind changes
// nothing.
func TestSealExactKeepsTheCallersCount(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t)
	ctx := testkit.Context(t)
	must(tr.Discover(ctx, "exact", "a", "b", "c"))
	d := must(tr.SealExact(ctx, "exact", 2))
	if !d.Sealed || d.Total != 2 {
		t.Fatalf("SealExact(2) with 3 discovered: %+v, want sealed at 2", d)
	}
	if d = must(tr.Seal(ctx, "exact", 5)); d.Total != 2 {
		t.Fatalf("Seal after SealExact changed the total to %d", d.Total)
	}
	must(tr.Discover(ctx, "larger", "a", "b", "c"))
	if d = must(tr.Seal(ctx, "larger", 2)); d.Total != 3 {
		t.Fatalf("Seal(2) with 3 discovered: total %d, want 3", d.Total)
	}
	must(tr.Count(ctx, "exact", "a", false))
	if d = must(tr.Count(ctx, "exact", "b", false)); !d.Publish {
		t.Fatalf("2 of a total of 2 counted: %+v, want the completion decided", d)
	}
}
