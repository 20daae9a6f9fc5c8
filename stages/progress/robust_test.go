package progress_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/progress"
)

// Totals and counts are integers end to end, whatever their size: Lua
// formats numbers with 14 significant digits ("1.1258999068426e+15"), which
// must never reach the hash or the reply.
func TestLargeTotalsStayIntegers(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t)
	ctx := testkit.Context(t)
	for _, total := range []int64{1 << 50, 123456789012345678, math.MaxInt64} {
		id := "big"
		if _, err := tr.Rebuild(ctx, id, progress.Snapshot{}); err != nil { // a fresh job
			t.Fatal(err)
		}
		d, err := tr.Seal(ctx, id, total)
		if err != nil || d.Total != total || d.Publish {
			t.Fatalf("Seal(%d) = %+v, %v", total, d, err)
		}
		d, err = tr.Count(ctx, id, "x", false)
		if err != nil || d.Total != total || d.Done != 1 {
			t.Fatalf("Count after Seal(%d) = %+v, %v", total, d, err)
		}
		st, err := tr.Get(ctx, id)
		if err != nil || st.Total != total {
			t.Fatalf("Get after Seal(%d) = %+v, %v", total, st, err)
		}
		d, err = tr.Rebuild(ctx, id, progress.Snapshot{Total: total, Sealed: true, Items: map[string]bool{"x": false}})
		if err != nil || d.Total != total || d.Done != 1 {
			t.Fatalf("Rebuild(total %d) = %+v, %v", total, d, err)
		}
	}
}

// A duplicate of another item, delivered while the completion is pending
// (decided, not yet marked done) — a rebalance redelivers uncommitted
// records of other partitions — does not publish the completion again:
// only a redelivery of the record that decided it (the crash path) or a
// repeated seal does.
func TestDuplicateWhilePendingDoesNotRepublish(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t)
	ctx := testkit.Context(t)
	must(tr.Discover(ctx, "p", "a", "b", "c"))
	must(tr.Seal(ctx, "p", 3))
	must(tr.Count(ctx, "p", "a", false))
	must(tr.Count(ctx, "p", "b", false))
	d := must(tr.Count(ctx, "p", "c", true))
	if !d.Publish || d.Repeat {
		t.Fatalf("last item: %+v, want the first decision", d)
	}
	for _, it := range []string{"a", "b"} {
		if d := must(tr.Count(ctx, "p", it, false)); d.Publish || d.Counted {
			t.Errorf("duplicate of %s while pending: %+v, want no publish", it, d)
		}
	}
	// The stage outputs nothing for such a duplicate either.
	st := progress.Stage(tr, func(m stages.Msg[string]) (progress.Item, error) {
		return progress.Item{Job: "p", ID: m.Value}, nil
	}, 0)
	if out, err := st(ctx, stages.Msg[string]{Value: "a"}); err != nil || len(out) != 0 {
		t.Errorf("stage on a duplicate while pending = %v, %v; want nothing", out, err)
	}
	// The deciding record, redelivered after a crash, repeats the decision.
	if d := must(tr.Count(ctx, "p", "c", true)); !d.Publish || !d.Repeat {
		t.Errorf("redelivered deciding item: %+v, want a repeated decision", d)
	}
	if out, err := st(ctx, stages.Msg[string]{Value: "c"}); err != nil || len(out) != 1 || !out[0].Repeat {
		t.Errorf("stage on the redelivered deciding item = %+v, %v; want one repeated completion", out, err)
	}
	// So does a repeated seal (the collector's crash path).
	if d := must(tr.Seal(ctx, "p", 3)); !d.Publish || !d.Repeat {
		t.Errorf("repeated seal while pending: %+v, want a repeated decision", d)
	}
	must(tr.MarkDone(ctx, "p"))
	for _, it := range []string{"a", "c"} {
		if d := must(tr.Count(ctx, "p", it, false)); d.Publish {
			t.Errorf("count of %s after done: %+v", it, d)
		}
	}
	if d := must(tr.Seal(ctx, "p", 3)); d.Publish {
		t.Errorf("seal after done: %+v", d)
	}
}

// A completion decided by the seal is repeated by the next seal, and not
// by duplicates of counted items.
func TestSealDecisionRepeatedBySealOnly(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t)
	ctx := testkit.Context(t)
	must(tr.Discover(ctx, "p", "a"))
	must(tr.Count(ctx, "p", "a", false))
	if d := must(tr.Seal(ctx, "p", 1)); !d.Publish || d.Repeat {
		t.Fatalf("seal with everything counted: %+v", d)
	}
	if d := must(tr.Count(ctx, "p", "a", false)); d.Publish {
		t.Errorf("duplicate after a seal decision: %+v, want no publish", d)
	}
	if d := must(tr.Seal(ctx, "p", 1)); !d.Publish || !d.Repeat {
		t.Errorf("repeated seal: %+v, want a repeated decision", d)
	}
}

// Empty job or item ids are refused (an empty item id would make every
// item without an id count once in all); the stage dead-letters such a
// record instead of retrying it.
func TestEmptyIDsRefused(t *testing.T) {
	t.Parallel()
	tr, r := newTracker(t)
	ctx := testkit.Context(t)
	must(tr.Init(ctx, "p"))
	calls := map[string]func() error{
		"count empty item":    func() error { _, err := tr.Count(ctx, "p", "", false); return err },
		"count empty job":     func() error { _, err := tr.Count(ctx, "", "x", false); return err },
		"discover empty item": func() error { _, err := tr.Discover(ctx, "p", "a", ""); return err },
		"init empty job":      func() error { _, err := tr.Init(ctx, ""); return err },
		"seal empty job":      func() error { _, err := tr.Seal(ctx, "", 1); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, progress.ErrInvalidID) {
			t.Errorf("%s: %v, want ErrInvalidID", name, err)
		}
	}
	st := must(tr.Get(ctx, "p"))
	if st.Total != 0 || st.Done != 0 {
		t.Errorf("refused calls changed the state: %+v", st)
	}
	if n := must(r.Client.Exists(ctx, tr.Key("")).Result()); n != 0 {
		t.Errorf("a key for the empty job id was created")
	}
	stage := progress.Stage(tr, func(m stages.Msg[progress.Item]) (progress.Item, error) { return m.Value, nil }, 0)
	for _, it := range []progress.Item{{Job: "p"}, {ID: "x"}} {
		_, err := stage(context.Background(), stages.Msg[progress.Item]{Value: it})
		if c := stages.Classify(err); c == nil || c.Kind != stages.KindDeadLetter || c.Reason != stages.ReasonSanityFail {
			t.Errorf("stage on %+v: %v, want a sanity_fail dead letter", it, err)
		}
	}
}

// A job id ending in ":items" or ":found" is refused by every call that
// takes a job id: its hash key would be the items or found set of another
// job ("x:items" is job x's items set), which would fail both jobs with
// WRONGTYPE errors or corrupt their counts. Neither job's keys are
// touched, and the stage dead-letters such an item.
func TestReservedJobIDSuffixesRefused(t *testing.T) {
	t.Parallel()
	tr, r := newTracker(t)
	ctx := testkit.Context(t)
	must(tr.Init(ctx, "x"))
	must(tr.Discover(ctx, "x", "a", "b"))
	must(tr.Count(ctx, "x", "a", false))
	for _, id := range []string{"x:items", "x:found", "y:items", "y:found", ":items"} {
		calls := map[string]func() error{
			"init":      func() error { _, err := tr.Init(ctx, id); return err },
			"start":     func() error { _, err := tr.Start(ctx, id); return err },
			"discover":  func() error { _, err := tr.Discover(ctx, id, "i"); return err },
			"seal":      func() error { _, err := tr.Seal(ctx, id, 1); return err },
			"count":     func() error { _, err := tr.Count(ctx, id, "i", true); return err },
			"mark done": func() error { _, err := tr.MarkDone(ctx, id); return err },
			"rebuild": func() error {
				_, err := tr.Rebuild(ctx, id, progress.Snapshot{Items: map[string]bool{"i": false}, Total: 1, Sealed: true})
				return err
			},
			"get": func() error { _, err := tr.Get(ctx, id); return err },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, progress.ErrInvalidID) {
				t.Errorf("%s %q: %v, want ErrInvalidID", name, id, err)
			}
		}
		if err := progress.CheckJobID(id); !errors.Is(err, progress.ErrInvalidID) {
			t.Errorf("CheckJobID(%q) = %v, want ErrInvalidID", id, err)
		}
	}
	// Job x is intact: its sets are still sets with its items only.
	if st := must(tr.Get(ctx, "x")); st.Total != 2 || st.Done != 1 || st.Errors != 0 || st.Status != progress.StatusCrawling {
		t.Errorf("job x after the refused calls: %+v, want CRAWLING total=2 done=1 errors=0", st)
	}
	for key, want := range map[string]string{tr.Key("x") + ":items": "[a]", tr.Key("x") + ":found": "[a b]"} {
		typ := must(r.Client.Type(ctx, key).Result())
		ms := must(r.Client.SMembers(ctx, key).Result())
		slices.Sort(ms)
		if typ != "set" || fmt.Sprint(ms) != want {
			t.Errorf("%s: %s %v, want a set %s", key, typ, ms, want)
		}
	}
	// No key was created for the refused ids, so job y works normally.
	if n := must(r.Client.Exists(ctx, tr.Key("y:items"), tr.Key("y:found"), tr.Key(":items")).Result()); n != 0 {
		t.Errorf("%d keys created for refused job ids", n)
	}
	must(tr.Init(ctx, "y"))
	must(tr.Discover(ctx, "y", "a"))
	must(tr.Seal(ctx, "y", 1))
	if d := must(tr.Count(ctx, "y", "a", false)); !d.Publish || d.Done != 1 {
		t.Errorf("job y: %+v, want its completion decided", d)
	}
	// Ids that only contain the suffixes elsewhere are ordinary ids.
	for _, id := range []string{"items", "found", "x:items:1", "x:itemsz", "x:Items", "x:found "} {
		if st, err := tr.Init(ctx, id); err != nil || st.Status != progress.StatusInitializing {
			t.Errorf("init %q: %+v, %v; want an INITIALIZING job", id, st, err)
		}
	}
	stage := progress.Stage(tr, func(m stages.Msg[progress.Item]) (progress.Item, error) { return m.Value, nil }, 0)
	for _, it := range []progress.Item{{Job: "x:items", ID: "c"}, {Job: "x:found", ID: "c"}} {
		_, err := stage(context.Background(), stages.Msg[progress.Item]{Value: it})
		if c := stages.Classify(err); c == nil || c.Kind != stages.KindDeadLetter || c.Reason != stages.ReasonSanityFail || !errors.Is(err, progress.ErrInvalidID) {
			t.Errorf("stage on %+v: %v, want a sanity_fail dead letter wrapping ErrInvalidID", it, err)
		}
	}
	if st := must(tr.Get(ctx, "x")); st.Done != 1 {
		t.Errorf("job x counted the refused items: %+v", st)
	}
}
