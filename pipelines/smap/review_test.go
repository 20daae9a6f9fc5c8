package smap

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages/progress"
)

// TestChoreographyEdges probes the edges of the project life cycle: empty
// projects, crawlers that panic, analysers whose messages are not UTF-8, a
// replay of an expired completed project and a rebuild racing live work.
func TestChoreographyEdges(t *testing.T) {
	pgs := testkit.NewPostgresServer(t)
	t.Run("EmptyProject", func(t *testing.T) { t.Parallel(); testEmptyProject(t, pgs) })
	t.Run("CrawlerPanics", func(t *testing.T) { t.Parallel(); testCrawlerPanics(t, pgs) })
	t.Run("AnalyserErrorNotUTF8", func(t *testing.T) { t.Parallel(); testAnalyserErrorNotUTF8(t, pgs) })
	t.Run("ReplayOfExpiredCompletedProject", func(t *testing.T) { t.Parallel(); testReplayExpired(t, pgs) })
	t.Run("RebuildRacesLiveWork", func(t *testing.T) { t.Parallel(); testRebuildRace(t, pgs) })
	t.Run("ShortStoreOutageDuringCrawl", func(t *testing.T) { t.Parallel(); testCrawlOutage(t, pgs) })
	t.Run("CollectorCrashBeforeSeal", func(t *testing.T) { t.Parallel(); testCrashBeforeSeal(t, pgs) })
	t.Run("CrawlRetries", func(t *testing.T) { t.Parallel(); testCrawlRetries(t, pgs) })
}

// The collector dies after crawling one of a project's two targets (its 3
// items stored, journaled and counted in the total), before the seal (none
// announced: the announcements commit with the crawl), and a duplicate
// project.created follows: the restarted crawl counts every item once
// (total 5, not 5 + 3 or 5 + 5), announces each once, and the project
// completes once.
func testCrashBeforeSeal(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	h.cfg.Runtime.RevokeTimeout = 300 * time.Millisecond
	crash := h.cfg
	emitted := make(chan struct{})
	var once sync.Once
	syn := &SyntheticCrawler{}
	crash.Crawler = crawlerFunc(func(ctx context.Context, p ProjectCreated, tg Target, emit func(Item) error) error {
		if tg.Platform != "youtube" {
			return syn.Crawl(ctx, p, tg, emit)
		}
		once.Do(func() { close(emitted) })
		<-ctx.Done() // the process dies here
		return ctx.Err()
	})
	d := h.start(crash)
	h.createProject(ProjectCreated{ProjectID: "p-crash-crawl", Targets: []Target{synthetic("tiktok", 3), synthetic("youtube", 2)}})
	select {
	case <-emitted:
	case <-time.After(30 * time.Second):
		t.Fatal("the crawl did not start")
	}
	testkit.WaitFor(t, 30*time.Second, "3 items discovered", func() bool { return h.state("p-crash-crawl").Total == 3 })
	d.stop()
	if st := h.state("p-crash-crawl"); st.Total != 3 || st.Done != 0 || st.Sealed || st.Status != progress.StatusCrawling {
		t.Fatalf("after the crash: %+v", st)
	}
	h.createProject(ProjectCreated{ProjectID: "p-crash-crawl", Targets: []Target{synthetic("tiktok", 3), synthetic("youtube", 2)}}) // a duplicate
	h.start(h.cfg)
	st := h.waitDone("p-crash-crawl", 30*time.Second)
	if st.Total != 5 || st.Done != 5 || st.Errors != 0 {
		t.Fatalf("final state %+v, want total=done=5", st)
	}
	testkit.WaitFor(t, 30*time.Second, "collector caught up", func() bool { return h.caughtUp(h.cfg.CollectorGroup, h.cfg.ProjectCreatedTopic) })
	if st := h.state("p-crash-crawl"); st.Total != 5 || st.Done != 5 {
		t.Fatalf("after the duplicate: %+v", st)
	}
	if cs := h.completions("p-crash-crawl"); len(cs) != 1 || cs[0].Total != 5 {
		t.Fatalf("completions %+v, want one with total 5", cs)
	}
	if n := h.events(h.cfg.DataCollectedTopic); n != 5 {
		t.Fatalf("%d data.collected visible to read_committed, want 5", n)
	}
}

// flakyPuts fails the first n writes of raw objects, like an object store
// (or Redis) that is briefly unavailable.
type flakyPuts struct {
	objstore.Store
	mu   sync.Mutex
	fail int
}

func (f *flakyPuts) Put(ctx context.Context, key string, data []byte, ct string) error {
	f.mu.Lock()
	failing := strings.HasPrefix(key, "raw/") && f.fail > 0
	if failing {
		f.fail--
	}
	f.mu.Unlock()
	if failing {
		return errors.New("injected: connection refused")
	}
	return f.Store.Put(ctx, key, data, ct)
}

// A transient outage of the collector's stores that outlasts the runtime's
// default retries (five attempts) does not strand the project in CRAWLING
// behind a dead-lettered project.created: the collector retries as long as
// the progress counter does, and the project completes.
func testCrawlOutage(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	h.objects = &flakyPuts{Store: h.objects, fail: 8}
	h.start(h.cfg)
	h.createProject(ProjectCreated{ProjectID: "p-outage", Targets: []Target{synthetic("tiktok", 4)}})
	st := h.waitDone("p-outage", 60*time.Second)
	if st.Total != 4 || st.Done != 4 || st.Errors != 0 {
		t.Fatalf("final state %+v", st)
	}
	if cs := h.completions("p-outage"); len(cs) != 1 {
		t.Fatalf("%d completions, want 1", len(cs))
	}
	if n := h.count(h.cfg.AnalyticsErrorsTopic); n != 0 {
		t.Fatalf("%d DLQ records, want none", n)
	}
}

// getProgress GETs the progress API of id on srv.
func getProgress(t *testing.T, srv *httptest.Server, id string) (int, Progress) {
	t.Helper()
	resp, err := http.Get(srv.URL + "/api/v1/projects/" + id + "/progress")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var p Progress
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("GET progress %s: %d %q: %v", id, resp.StatusCode, body, err)
	}
	return resp.StatusCode, p
}

// A project without items (no targets, or targets that yield nothing)
// completes at the seal, exactly once, and reports 100 %.
func testEmptyProject(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	d := h.start(h.cfg)
	h.createProject(ProjectCreated{ProjectID: "p-none"})
	h.createProject(ProjectCreated{ProjectID: "p-zero", Targets: []Target{synthetic("tiktok", 0)}})
	srv := httptest.NewServer(d.env.Ops.Handler())
	defer srv.Close()
	for _, id := range []string{"p-none", "p-zero"} {
		st := h.waitDone(id, 30*time.Second)
		if st.Total != 0 || st.Done != 0 || !st.Sealed {
			t.Errorf("%s: final state %+v", id, st)
		}
		if cs := h.completions(id); len(cs) != 1 {
			t.Errorf("%s: %d completions, want 1", id, len(cs))
		}
		code, p := getProgress(t, srv, id)
		if want := (Progress{ProjectID: id, Status: progress.StatusDone, Percent: 100}); code != 200 || p != want {
			t.Errorf("%s: GET progress %d %+v, want 200 %+v", id, code, p, want)
		}
	}
}

// A crawler that panics on one target is a failed target, like one that
// returns an error: the project completes with the other targets' items
// instead of staying CRAWLING forever behind a dead-lettered
// project.created.
func testCrawlerPanics(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	syn := &SyntheticCrawler{}
	h.cfg.Crawler = crawlerFunc(func(ctx context.Context, p ProjectCreated, tg Target, emit func(Item) error) error {
		if tg.Platform == "broken" {
			if err := syn.Crawl(ctx, p, Target{Platform: "broken", URL: "synthetic://broken?items=2"}, emit); err != nil {
				return err
			}
			var m map[string]int
			m["boom"]++ // a nil-map bug in a custom crawler, after two items
		}
		return syn.Crawl(ctx, p, tg, emit)
	})
	d := h.start(h.cfg)
	h.createProject(ProjectCreated{ProjectID: "p-panic", Targets: []Target{synthetic("tiktok", 3), {Platform: "broken"}, synthetic("facebook", 4)}})
	st := h.waitDone("p-panic", 30*time.Second)
	if st.Total != 9 || st.Done != 9 {
		t.Fatalf("final state %+v, want total=done=9 (3 + the 2 found before the panic + 4)", st)
	}
	if cs := h.completions("p-panic"); len(cs) != 1 {
		t.Fatalf("%d completions, want 1", len(cs))
	}
	if v := testkit.Metric(t, d.reg, "smap_crawl_errors_total", "platform", "broken"); v != 1 {
		t.Errorf("smap_crawl_errors_total{platform=broken} = %v, want 1", v)
	}
	if n := h.count(h.cfg.AnalyticsErrorsTopic); n != 0 {
		t.Errorf("%d DLQ records, want none", n)
	}
}

// notUTF8 fails with a message that is not valid UTF-8 (a byte-sliced
// multi-byte character), as a custom analyser may.
type notUTF8 struct{ panics bool }

func (notUTF8) Name() string { return "not-utf8" }
func (a notUTF8) Analyze(in *Input, _ *Result) error {
	msg := "cannot parse " + "ệ"[:2]
	if a.panics {
		panic(msg)
	}
	return errors.New(msg)
}

// An analyser failure whose message is not UTF-8 is a failed item like any
// other: PostgreSQL must not refuse its error_msg and stall the partition.
func testAnalyserErrorNotUTF8(t *testing.T, pgs *testkit.PostgresServer) {
	for _, panics := range []bool{false, true} {
		h := newHarness(t, pgs, harnessOpts{})
		h.cfg.Analyzers = append(Builtins(), notUTF8{panics: panics})
		h.start(h.cfg)
		h.createProject(ProjectCreated{ProjectID: "p-utf8", Targets: []Target{synthetic("tiktok", 3)}})
		st := h.waitDone("p-utf8", 30*time.Second)
		if st.Done != 3 || st.Errors != 3 {
			t.Fatalf("panics=%t: final state %+v, want done=errors=3", panics, st)
		}
		if rows, failed := h.rows("p-utf8"); rows != 3 || failed != 3 {
			t.Fatalf("panics=%t: post_analytics %d rows, %d failed", panics, rows, failed)
		}
	}
}

// A project.created replayed after the completed project's state expired
// (meta object records the completion) is not crawled again: no new items,
// no second completion.
func testReplayExpired(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	old := time.Now().Add(-8 * 24 * time.Hour)
	if err := updateMeta(testkit.Context(t), h.objects, "p-old", func(m *projectMeta) {
		m.Total, m.SealedAt, m.CompletedAt = 3, old, old
	}); err != nil {
		t.Fatal(err)
	}
	d := h.start(h.cfg)
	h.createProject(ProjectCreated{ProjectID: "p-old", Targets: []Target{synthetic("tiktok", 3)}})
	h.createProject(ProjectCreated{ProjectID: "p-new", Targets: []Target{synthetic("tiktok", 2)}})
	h.waitDone("p-new", 30*time.Second)
	testkit.WaitFor(t, 30*time.Second, "collector caught up", func() bool { return h.caughtUp(h.cfg.CollectorGroup, h.cfg.ProjectCreatedTopic) })
	if n := h.events(h.cfg.DataCollectedTopic); n != 2 {
		t.Errorf("%d data.collected records, want the 2 of p-new only", n)
	}
	if st := h.state("p-old"); st.Status != progress.StatusNotFound {
		t.Errorf("expired project got state %+v", st)
	}
	if cs := h.completions("p-old"); len(cs) != 0 {
		t.Errorf("expired project completed again: %+v", cs)
	}
	if v := testkit.Metric(t, d.reg, "smap_projects_total", "outcome", "skipped_done"); v != 1 {
		t.Errorf("smap_projects_total{outcome=skipped_done} = %v, want 1", v)
	}
}

// rebuild-progress while the pipeline keeps working: an item counted and a
// seal made after the rebuild read the systems of record, but before it
// replaced the state, are not lost (the project still completes).
func testRebuildRace(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	ctx := testkit.Context(t)
	env := h.env(prometheus.NewRegistry())
	const id = "p-race"
	// Project state: items a, b discovered; a analysed and counted.
	if err := updateMeta(ctx, h.objects, id, func(m *projectMeta) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.tr.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := h.tr.Discover(ctx, id, "a", "b"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	analysedCounted := func(item string) {
		if err := upsertRows(ctx, h.pg.Pool, []row{{ProjectID: id, ItemID: item, AnalyzedAt: now}}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.tr.Count(ctx, id, item, false); err != nil {
			t.Fatal(err)
		}
	}
	analysedCounted("a")
	cfg := h.cfg
	cfg.afterSnapshot = func(context.Context) {
		// Meanwhile the collector seals (meta first, then Redis) and the
		// counter counts b, whose row analytics wrote.
		if err := updateMeta(ctx, h.objects, id, func(m *projectMeta) { m.Total, m.SealedAt = 2, now }); err != nil {
			t.Error(err)
		}
		if _, err := h.tr.Seal(ctx, id, 2); err != nil {
			t.Error(err)
		}
		analysedCounted("b")
	}
	st, err := RebuildProgress(ctx, env, cfg, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Done != 2 || st.Total != 2 || !st.Sealed {
		t.Fatalf("after the rebuild: %+v, want done=total=2 sealed", st)
	}
	// The count of b completed the project; the rebuild erased that
	// decision, so it decides again and publishes the completion.
	if st.Status != progress.StatusDone {
		t.Fatalf("after the rebuild: %+v, want DONE", st)
	}
	if cs := h.completions(id); len(cs) != 1 || cs[0].Done != 2 {
		t.Fatalf("completions %+v, want one with done=2", cs)
	}

	// A completion published (and recorded) between the snapshot and the
	// replacement is marked done, not published again.
	k := h.tr.Key(id)
	if err := h.redis.Client.Del(ctx, k, k+":items", k+":found").Err(); err != nil {
		t.Fatal(err)
	}
	if err := updateMeta(ctx, h.objects, id, func(m *projectMeta) { m.CompletedAt = time.Time{} }); err != nil {
		t.Fatal(err)
	}
	cfg.afterSnapshot = func(context.Context) {
		if err := updateMeta(ctx, h.objects, id, func(m *projectMeta) { m.CompletedAt = now }); err != nil {
			t.Error(err)
		}
	}
	st, err = RebuildProgress(ctx, env, cfg, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != progress.StatusDone || st.Done != 2 {
		t.Fatalf("after the second rebuild: %+v, want DONE", st)
	}
	if cs := h.completions(id); len(cs) != 1 {
		t.Fatalf("%d completions after the second rebuild, want 1", len(cs))
	}
}

// The progress API's edges: unknown and odd ids, methods and routes.
func TestProgressAPIEdges(t *testing.T) {
	r := testkit.NewRedis(t, testkit.WithRedisDB(1), testkit.FakeOK())
	cfg := Config{KeyPrefix: r.Prefix + "smap:proj:"}
	tr, err := NewTracker(r.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	if _, err := tr.Init(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Discover(ctx, "p1", "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	for _, it := range []string{"a", "a", "b", "b"} {
		if _, err := tr.Count(ctx, "p1", it, false); err != nil {
			t.Fatal(err)
		}
	}
	ops := opshttp.New(prometheus.NewRegistry(), nil)
	ops.Handle(ProgressRoute, ProgressHandler(tr, nil))
	srv := httptest.NewServer(ops.Handler())
	defer srv.Close()
	for _, c := range []struct {
		method, path string
		code         int
		json         bool
	}{
		{"GET", "/api/v1/projects/p1/progress", 200, true},
		{"HEAD", "/api/v1/projects/p1/progress", 200, false},
		{"GET", "/api/v1/projects/nope/progress", 404, true},
		{"GET", "/api/v1/projects/a%2Fb/progress", 404, true},
		{"GET", "/api/v1/projects/" + strings.Repeat("x", 5000) + "/progress", 404, true},
		{"GET", "/api/v1/projects/%00/progress", 404, true},
		{"POST", "/api/v1/projects/p1/progress", 405, false},
		{"GET", "/api/v1/projects/p1/progress/", 404, false},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ct := resp.Header.Get("Content-Type")
		t.Logf("%s %.60s → %d %s %.120s", c.method, c.path, resp.StatusCode, ct, body)
		if resp.StatusCode != c.code {
			t.Errorf("%s %.60s: %d, want %d", c.method, c.path, resp.StatusCode, c.code)
		}
		if c.json && (ct != "application/json" || !json.Valid(body)) {
			t.Errorf("%s %.60s: %s %q, want JSON", c.method, c.path, ct, body)
		}
	}
	code, p := getProgress(t, srv, "p1")
	if want := (Progress{ProjectID: "p1", Status: progress.StatusCrawling, Total: 3, Processed: 2, Percent: 66.67}); code != 200 || p != want {
		t.Errorf("p1: %d %+v, want %+v", code, p, want)
	}
}

// Percent is processed/total rounded to two decimals, but never 100 while
// items remain, never above 100, and 100 once the project is DONE.
func TestProgressPercent(t *testing.T) {
	for _, c := range []struct {
		st   progress.State
		want float64
	}{
		{progress.State{Status: progress.StatusProcessingWait, Total: 3, Done: 2}, 66.67},
		{progress.State{Status: progress.StatusProcessingWait, Total: 20000, Done: 19999}, 99.99},
		{progress.State{Status: progress.StatusProcessingWait, Total: 1 << 40, Done: 1<<40 - 1}, 99.99},
		{progress.State{Status: progress.StatusCrawling, Total: 5, Done: 7}, 100},
		{progress.State{Status: progress.StatusInitializing}, 0},
		{progress.State{Status: progress.StatusDone}, 100},
		{progress.State{Status: progress.StatusDone, Total: 4, Done: 4}, 100},
	} {
		if got := ProgressOf(c.st).Percent; got != c.want {
			t.Errorf("%+v: percent %v, want %v", c.st, got, c.want)
		}
	}
}

// The built-in analysers take empty, huge and invalid UTF-8 text (a
// custom crawler's raw item) without failing or panicking.
func TestAnalysersOddText(t *testing.T) {
	huge := strings.Repeat("VinFast VF3 rất tốt nhưng hơi đắt, I love it but not great. ", 80000) // ~5 MB
	for name, text := range map[string]string{
		"empty": "", "spaces": " \t\n ", "huge": huge,
		"not-utf8": "VF3 \xff\xfe rất t\xe1\xbb", "nul": "VF3\x00tốt", "combining": "to\u0301t VF3 e\u0302\u0301",
	} {
		in := Input{Item: RawItem{Item: Item{Text: text}}, Keywords: []string{"VF3", "", "\xff", "VinFast VF3"}, Tokens: tokenize(text)}
		var res Result
		for _, an := range Builtins() {
			if err := runAnalyzer(an, &in, &res); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		if res.Language == "" || res.SentimentLabel == "" || res.SentimentScore < -1 || res.SentimentScore > 1 {
			t.Errorf("%s: result %+v", name, res)
		}
	}
}
