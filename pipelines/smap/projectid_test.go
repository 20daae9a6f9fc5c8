package smap

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/progress"
)

// A project id ending in ":items" or ":found" would share Redis keys with
// another project (the hash of "p:items" is the items set of "p"): the
// progress tracker refuses it (progress.ErrInvalidID) and smap turns that
// into a dead letter with reason sanity_fail and rule smap.project_id, in
// the collector and in the progress counter, instead of retrying it; the
// progress API answers 404 for it. Project p is not touched.
func TestReservedProjectIDSuffixes(t *testing.T) {
	t.Parallel()
	r := testkit.NewRedis(t, testkit.WithRedisDB(1), testkit.FakeOK())
	cfg := Config{KeyPrefix: r.Prefix + "smap:proj:"}.withDefaults()
	tr, err := NewTracker(r.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	if _, err := tr.Init(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Discover(ctx, "p", "a", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Count(ctx, "p", "a", false); err != nil {
		t.Fatal(err)
	}
	wantDLQ := func(what string, err error) {
		t.Helper()
		c := stages.Classify(err)
		if c == nil || c.Kind != stages.KindDeadLetter || c.Reason != stages.ReasonSanityFail || c.Rule != RuleProjectID {
			t.Errorf("%s: %v, want a sanity_fail dead letter with rule %s", what, err, RuleProjectID)
		}
	}
	col := &collector{cfg: cfg, tr: tr, objects: objects, m: m, log: slog.New(slog.DiscardHandler)}
	counter := counterStage(cfg, tr, objects, m)
	srv := httptest.NewServer(http.StripPrefix("/x/", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		req.SetPathValue("id", req.URL.Path)
		ProgressHandler(tr, slog.New(slog.DiscardHandler)).ServeHTTP(w, req)
	})))
	defer srv.Close()
	for _, id := range []string{"p:items", "p:found", "q:items"} {
		_, err := col.stage(ctx, stages.Msg[Event[ProjectCreated]]{Value: NewProjectCreated(ProjectCreated{
			ProjectID: id, Keywords: []string{"VF3"}, Targets: []Target{{Platform: "tiktok"}}}, time.Now())})
		wantDLQ("collector "+id, err)
		_, err = counter(ctx, stages.Msg[Event[AnalysisFinished]]{Value: Event[AnalysisFinished]{Payload: AnalysisFinished{
			ProjectID: id, ItemID: "c", Status: AnalysisOK, AnalyzedAt: time.Now()}}})
		wantDLQ("progress counter "+id, err)
		if !errors.Is(err, progress.ErrInvalidID) {
			t.Errorf("progress counter %s: %v does not wrap progress.ErrInvalidID", id, err)
		}

		resp, err := http.Get(srv.URL + "/x/" + id)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p Progress
		if resp.StatusCode != http.StatusNotFound || json.Unmarshal(body, &p) != nil || p.Status != progress.StatusNotFound || p.ProjectID != id {
			t.Errorf("progress API for %s: %d %s, want 404 with status NOT_FOUND", id, resp.StatusCode, body)
		}
	}
	if st, err := tr.Get(ctx, "p"); err != nil || st.Total != 2 || st.Done != 1 || st.Status != progress.StatusCrawling {
		t.Errorf("project p after the refused ids: %+v, %v; want CRAWLING total=2 done=1", st, err)
	}
	if n, err := r.Client.Exists(ctx, tr.Key("q:items"), tr.Key("q")).Result(); err != nil || n != 0 {
		t.Errorf("%d keys created for the refused project q:items (%v)", n, err)
	}
	if _, err := objects.Get(ctx, metaKey("q:items")); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("meta object of the refused project q:items: %v, want none", err)
	}
}
