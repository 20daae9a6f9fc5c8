package smap

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// afterJournalGet runs hook once, right after the nth read of a crawl
// journal through it returns (1: inside addToJournal's read-merge-write;
// 2, for a one-target project: the seal's read).
type afterJournalGet struct {
	objstore.Store
	nth   int32
	hook  func()
	reads atomic.Int32
}

func (s *afterJournalGet) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := s.Store.Get(ctx, key)
	if strings.HasSuffix(key, ".items.json") && s.reads.Add(1) == s.nth {
		s.hook()
	}
	return b, err
}

// Two writers of one project's journal: a member that lost the partition
// but still runs the record (its transaction is fenced) and the new owner.
// The old member journals, counts and seals its four items after the new
// owner read the journal for its seal and before that seal: the new owner
// finds the project sealed at four and announces the journal's four items,
// read again. (A write of the old member that replaces one of the new
// owner's with items it lacks cannot be made whole: docs/pipelines/smap.md.)
func TestCollectorSealedFirstByAnotherWriterAnnouncesItsItems(t *testing.T) {
	t.Parallel()
	d := newCollectorDeps(t)
	p := ProjectCreated{ProjectID: "p-zombie", Targets: []Target{{Platform: "tiktok"}}}
	src := stages.Source{Topic: "pc", Partition: 1, Offset: 12}
	zombie, _ := d.collector(t, crawlerFunc(func(_ context.Context, _ ProjectCreated, _ Target, emit func(Item) error) error {
		return emitN(emit, 4)
	}), run.RetryPolicy{MaxAttempts: 1})
	owner, _ := d.collector(t, crawlerFunc(func(_ context.Context, _ ProjectCreated, _ Target, emit func(Item) error) error {
		return emitN(emit, 3)
	}), run.RetryPolicy{MaxAttempts: 1})
	st := &afterJournalGet{Store: d.objects, nth: 2} // the seal's read
	st.hook = func() {
		if _, _, err := attemptsAt(t, zombie, p, src, 30); err != nil {
			t.Errorf("zombie: %v", err)
		}
	}
	owner.objects = st
	_, outs, err := attemptsAt(t, owner, p, src, 30)
	if err != nil {
		t.Fatal(err)
	}
	state, err := owner.tr.Get(testkit.Context(t), p.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	got := announced(outs)
	if state.Total != 4 || len(got) != 4 {
		t.Errorf("sealed total %d, %d items announced; want 4 and 4", state.Total, len(got))
	}
	for _, it := range items(p.ProjectID, "tiktok", int(state.Total)) {
		if !got[it] {
			t.Errorf("item %s counted in the sealed total %d but not announced by the committed delivery (%d announcements)", it, state.Total, len(outs))
		}
	}
}

// The sealing record's announcements committed; a duplicate project.created
// of the project (another offset) failed on its last attempt (a transient
// Redis error at Init) and was dead-lettered; the operator re-drives it
// (its origin header names the duplicate): it announces nothing, so
// read_committed readers see each item once.
func TestCollectorRedrivenDuplicateAnnouncesNothing(t *testing.T) {
	t.Parallel()
	d := newCollectorDeps(t)
	var armed atomic.Int32
	d.rdb.Client.AddHook(lostReply{&armed})
	col, _ := d.collector(t, crawlerFunc(func(_ context.Context, _ ProjectCreated, _ Target, emit func(Item) error) error {
		return emitN(emit, 3)
	}), run.RetryPolicy{MaxAttempts: 1})
	p := ProjectCreated{ProjectID: "p-dup-redrive", Targets: []Target{{Platform: "tiktok"}}}
	msg := func(off int64, attempt, max int, hs ...stages.Header) stages.Msg[Event[ProjectCreated]] {
		return stages.Msg[Event[ProjectCreated]]{Key: p.ProjectID, Value: NewProjectCreated(p, time.Now()), Headers: hs,
			Source: stages.Source{Topic: "pc", Offset: off}, Attempt: attempt, MaxAttempts: max}
	}
	committed := 0
	outs, err := col.stage(testkit.Context(t), msg(40, 1, 30))
	if err != nil {
		t.Fatal(err)
	}
	committed += len(outs) // the sealing record's transaction commits
	armed.Store(1)         // the duplicate's Init: Redis times out
	if _, err := col.stage(testkit.Context(t), msg(41, 1, 1)); stages.Classify(err).Kind != stages.KindRetry {
		t.Fatalf("duplicate's last attempt: %v, want a retry error (dead-lettered by the runtime)", err)
	}
	outs, err = col.stage(testkit.Context(t), msg(90, 1, 30, stages.Header{Key: stages.HeaderRedriveCount, Value: []byte("1")},
		originOf(stages.Source{Topic: "pc", Partition: 0, Offset: 41})))
	if err != nil {
		t.Fatal(err)
	}
	committed += len(outs)
	if committed != 3 {
		t.Errorf("%d data.collected committed for 3 items: the re-driven duplicate announced %d items already committed", committed, len(outs))
	}
}

// A member that lost the partition journals an item (s3) after the new
// owner sealed at three (its Discover changes nothing once sealed). The
// owner's transaction aborts; the sealing record, delivered again,
// announces the first three items of the journal, the sealed ones, not the
// fourth: the completion waits for every sealed item.
func TestCollectorReannouncesNoItemBeyondTheSealedTotal(t *testing.T) {
	t.Parallel()
	d := newCollectorDeps(t)
	col, _ := d.collector(t, crawlerFunc(func(_ context.Context, _ ProjectCreated, _ Target, emit func(Item) error) error {
		return emitN(emit, 3)
	}), run.RetryPolicy{MaxAttempts: 1})
	ctx := testkit.Context(t)
	p := ProjectCreated{ProjectID: "p-late-zombie", Targets: []Target{{Platform: "tiktok"}}}
	src := stages.Source{Topic: "pc", Offset: 8}
	if _, outs, err := attemptsAt(t, col, p, src, 30); err != nil || len(outs) != 3 {
		t.Fatalf("first crawl: %d announcements (%v), want 3", len(outs), err)
	}
	// The zombie's record() for the item only it found: journal, then Discover.
	late := items(p.ProjectID, "tiktok", 4)[3]
	if _, err := addToJournal(ctx, d.objects, p.ProjectID, []journalEntry{{ItemID: late, Platform: "tiktok",
		ObjectKey: ObjectKey("tiktok", late), CrawledAt: time.Now().UTC()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := col.tr.Discover(ctx, p.ProjectID, late); err != nil {
		t.Fatal(err)
	}
	_, outs, err := attemptsAt(t, col, p, src, 30)
	if err != nil {
		t.Fatal(err)
	}
	st, err := col.tr.Get(ctx, p.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(outs)) != st.Total {
		t.Errorf("the sealing record delivered again announced %d items against a sealed total of %d", len(outs), st.Total)
	}
}

// failFirstRawPut fails the first Put of a raw item object (a transient
// object-store error).
type failFirstRawPut struct {
	objstore.Store
	failed atomic.Bool
}

func (s *failFirstRawPut) Put(ctx context.Context, key string, b []byte, ct string) error {
	if strings.HasPrefix(key, "raw/") && s.failed.CompareAndSwap(false, true) {
		return errors.New("503 SlowDown")
	}
	return s.Store.Put(ctx, key, b, ct)
}

// A crawler that goes on after an emit error does not lose the item whose
// raw object failed to store on a transient error: the attempt fails with
// the store's error and the next one stores it; the project is sealed with
// every item.
func TestCollectorStoreErrorSwallowedByTheCrawlerFailsTheAttempt(t *testing.T) {
	t.Parallel()
	d := newCollectorDeps(t)
	col, _ := d.collector(t, crawlerFunc(func(_ context.Context, _ ProjectCreated, _ Target, emit func(Item) error) error {
		for i := range 3 {
			_ = emit(Item{SourceID: fmt.Sprintf("s%d", i)}) // a crawler that ignores emit errors
		}
		return nil
	}), run.RetryPolicy{MaxAttempts: 1})
	col.objects = &failFirstRawPut{Store: d.objects}
	p := ProjectCreated{ProjectID: "p-swallowed", Targets: []Target{{Platform: "tiktok"}}}
	_, outs, err := attemptsAt(t, col, p, stages.Source{Topic: "pc", Offset: 1}, 30)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 3 {
		t.Errorf("%d items announced and sealed, want 3: the item whose store failed transiently is lost", len(outs))
	}
}
