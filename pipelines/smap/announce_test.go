package smap

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
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

// A project.created delivered again after its project was sealed (the
// crash between the seal and the commit that would have made the
// announcements visible) is crawled again and announces every item of the
// sealed total again; an item the new crawl finds that the seal did not
// count is stored but not announced, and the total stays. A duplicate
// project.created (another record) of the sealed project announces
// nothing: the crawl that sealed it commits its own announcements.
func TestCollectorAnnouncesSealedItemsAgainOnRedelivery(t *testing.T) {
	t.Parallel()
	d := newCollectorDeps(t)
	crawls := 0
	cr := crawlerFunc(func(_ context.Context, _ ProjectCreated, _ Target, emit func(Item) error) error {
		crawls++
		for i := range 3 + crawls - 1 { // the second crawl finds one item more
			if err := emit(Item{SourceID: fmt.Sprintf("s%d", i)}); err != nil {
				return err
			}
		}
		return nil
	})
	col, reg := d.collector(t, cr, run.RetryPolicy{MaxAttempts: 1})
	p := ProjectCreated{ProjectID: "p-sealed", Targets: []Target{{Platform: "tiktok"}}}
	src := stages.Source{Topic: "pc", Partition: 2, Offset: 40}
	items := func() map[string]bool {
		t.Helper()
		_, outs, err := attemptsAt(t, col, p, src, 30)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, o := range outs {
			got[o.item] = true
		}
		return got
	}
	first := items()
	if len(first) != 3 {
		t.Fatalf("first crawl announced %d items, want 3", len(first))
	}
	second := items() // delivered again: the first crawl's announcements were lost
	if len(second) != 3 {
		t.Fatalf("redelivery announced %d items, want the 3 sealed ones", len(second))
	}
	for it := range first {
		if !second[it] {
			t.Errorf("sealed item %s not announced again", it)
		}
	}
	late := ItemID(p.ProjectID, "tiktok", "s3")
	if _, err := d.objects.Get(testkit.Context(t), ObjectKey("tiktok", late)); err != nil {
		t.Errorf("item found after the seal not stored: %v", err)
	}
	st, err := col.tr.Get(testkit.Context(t), p.ProjectID)
	if err != nil || !st.Sealed || st.Total != 3 {
		t.Errorf("state %+v (%v), want sealed with total 3", st, err)
	}
	if v := testkit.Metric(t, reg, "smap_projects_total", "outcome", "resealed"); v != 1 {
		t.Errorf("smap_projects_total{outcome=resealed} = %v, want 1", v)
	}
	src.Offset++ // a duplicate record
	if got := items(); len(got) != 0 {
		t.Errorf("a duplicate project.created announced %d items, want none", len(got))
	}
	if crawls != 2 {
		t.Errorf("%d crawls, want 2 (a duplicate is not crawled)", crawls)
	}
}
