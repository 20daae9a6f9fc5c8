package smap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// collectorDeps are the services a collector needs, shared by subtests
// (each uses its own project ids).
type collectorDeps struct {
	k       *testkit.Kafka
	rdb     *testkit.Redis
	objects objstore.Store
}

func newCollectorDeps(t *testing.T) collectorDeps {
	return collectorDeps{
		k:       testkit.NewKafka(t, testkit.FakeOK()),
		rdb:     testkit.NewRedis(t, testkit.WithRedisDB(1), testkit.FakeOK()),
		objects: testkit.NewObjectStore(t, testkit.FakeOK()).Store(t),
	}
}

// collector returns a collector on d with crawler cr and retry policy pol,
// and its metrics registry.
func (d collectorDeps) collector(t *testing.T, cr Crawler, pol run.RetryPolicy) (*collector, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Crawler: cr, CrawlRetry: pol, KeyPrefix: d.rdb.Prefix + "smap:proj:",
		DataCollectedTopic: d.k.Topic(t, "dc", 1), JobCompletedTopic: d.k.Topic(t, "jc", 1),
	}.withDefaults()
	tr, err := NewTracker(d.rdb.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	prod := d.k.Client(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &collector{cfg: cfg, tr: tr, objects: d.objects, m: m, log: log,
		comp: newCompleter(cfg, tr, prod, d.objects, m, log)}, reg
}

// attemptsUntilDone calls the collector's stage for one project.created
// record as the runtime does — the next attempt after a retry error, with
// Msg.PrevErr set, up to maxAttempts — and returns the waits the retries
// asked for, the last call's announcements and its error.
func attemptsUntilDone(t *testing.T, c *collector, p ProjectCreated, maxAttempts int) (waits []time.Duration, outs []collected, err error) {
	t.Helper()
	return attemptsAt(t, c, p, stages.Source{Topic: "pc", Offset: 7}, maxAttempts)
}

// attemptsAt is attemptsUntilDone for the project.created record at src.
func attemptsAt(t *testing.T, c *collector, p ProjectCreated, src stages.Source, maxAttempts int) (waits []time.Duration, outs []collected, err error) {
	t.Helper()
	m := stages.Msg[Event[ProjectCreated]]{Key: p.ProjectID, Value: NewProjectCreated(p, time.Now()), Source: src, Attempt: 1, MaxAttempts: maxAttempts}
	for ; ; m.Attempt++ {
		outs, err = c.stage(testkit.Context(t), m)
		cl := stages.Classify(err)
		if err == nil || cl.Kind != stages.KindRetry || m.LastAttempt() {
			return waits, outs, err
		}
		if len(outs) > 0 {
			t.Fatalf("attempt %d failed (%v) with %d announcements", m.Attempt, err, len(outs))
		}
		waits = append(waits, cl.After)
		m.PrevErr = err
	}
}

// A target failing transiently is crawled again at the next attempt of the
// project.created record, up to CrawlRetry.MaxAttempts crawls (or the
// runtime's last attempt), while a target that succeeded is not crawled
// again; a permanent error, a dead letter and a panic are not retried.
// The project is then sealed with the items of every crawl, and each
// retry and each skipped target is counted once.
func TestCollectorRetriesTransientTargets(t *testing.T) {
	t.Parallel()
	d := newCollectorDeps(t)
	fast := run.RetryPolicy{MaxAttempts: 4, Initial: time.Millisecond, Max: 5 * time.Millisecond}
	transient := stages.Retry(errors.New("503 Service Unavailable"))
	permanent := errors.New("404 Not Found")
	for i, c := range []struct {
		name        string
		fails       int   // crawls of the tiktok target that fail before one succeeds
		err         error // what they fail with
		panics      bool
		maxAttempts int // the runtime's (default 30)
		wantCalls   int // crawls of the tiktok target
		wantTotal   int64
		retries     float64
		skipped     float64
	}{
		{name: "transient twice then ok", fails: 2, err: transient, wantCalls: 3, wantTotal: 3, retries: 2},
		{name: "transient on every attempt", fails: 100, err: transient, wantCalls: 4, wantTotal: 2, retries: 3, skipped: 1},
		{name: "transient up to the runtime's last attempt", fails: 100, err: transient, maxAttempts: 2, wantCalls: 2, wantTotal: 2, retries: 1, skipped: 1},
		{name: "wrapped transient", fails: 1, err: fmt.Errorf("crawl: %w", transient), wantCalls: 2, wantTotal: 3, retries: 1},
		{name: "permanent", fails: 100, err: permanent, wantCalls: 1, wantTotal: 2, skipped: 1},
		{name: "dead letter is permanent", fails: 100, err: stages.DeadLetter(stages.ReasonSanityFail, "", permanent), wantCalls: 1, wantTotal: 2, skipped: 1},
		{name: "panic", fails: 100, panics: true, wantCalls: 1, wantTotal: 2, skipped: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var calls, others atomic.Int32
			cr := crawlerFunc(func(_ context.Context, _ ProjectCreated, tg Target, emit func(Item) error) error {
				if tg.Platform == "news" {
					others.Add(1)
					return emit(Item{SourceID: "n1"})
				}
				n := int(calls.Add(1))
				if err := emit(Item{SourceID: "first"}); err != nil { // found before failing
					return err
				}
				if n <= c.fails {
					if c.panics {
						panic("boom")
					}
					return c.err
				}
				return emit(Item{SourceID: "second"})
			})
			col, reg := d.collector(t, cr, fast)
			maxAttempts := c.maxAttempts
			if maxAttempts == 0 {
				maxAttempts = 30
			}
			id := fmt.Sprintf("p-retry-%d", i)
			_, outs, err := attemptsUntilDone(t, col, ProjectCreated{ProjectID: id, Targets: []Target{{Platform: "tiktok"}, {Platform: "news"}}}, maxAttempts)
			if err != nil {
				t.Fatalf("last attempt: %v, want the project sealed", err)
			}
			// The items of every attempt are announced once, by the last.
			items := map[string]bool{}
			for _, o := range outs {
				e, err := DecodeDataCollected(o.value)
				if err != nil || e.Payload.ItemID != o.item || items[o.item] {
					t.Fatalf("announcement %s: %+v (%v), duplicate %t", o.item, e, err, items[o.item])
				}
				items[o.item] = true
			}
			if int64(len(items)) != c.wantTotal {
				t.Errorf("%d items announced, want %d", len(items), c.wantTotal)
			}
			if n := int(calls.Load()); n != c.wantCalls {
				t.Errorf("%d crawls of the failing target, want %d", n, c.wantCalls)
			}
			if n := others.Load(); n != 1 {
				t.Errorf("%d crawls of the target that succeeded, want 1", n)
			}
			st, err := col.tr.Get(testkit.Context(t), id)
			if err != nil || !st.Sealed || st.Total != c.wantTotal {
				t.Errorf("state %+v (%v), want sealed with total %d", st, err, c.wantTotal)
			}
			if v := testkit.Metric(t, reg, "smap_crawl_retries_total", "platform", "tiktok"); v != c.retries {
				t.Errorf("smap_crawl_retries_total = %v, want %v", v, c.retries)
			}
			if v := testkit.Metric(t, reg, "smap_crawl_errors_total", "platform", "tiktok"); v != c.skipped {
				t.Errorf("smap_crawl_errors_total = %v, want %v", v, c.skipped)
			}
		})
	}
}

// The wait a retry asks the runtime for is at least the crawl error's
// RetryAfter, capped at CrawlRetry.Max.
func TestCollectorRetryWaits(t *testing.T) {
	t.Parallel()
	d := newCollectorDeps(t)
	failing := func(after time.Duration) Crawler {
		return crawlerFunc(func(context.Context, ProjectCreated, Target, func(Item) error) error {
			return stages.RetryAfter(after, errors.New("429 Too Many Requests"))
		})
	}
	for i, c := range []struct {
		after    time.Duration
		pol      run.RetryPolicy
		min, max time.Duration
	}{
		{150 * time.Millisecond, run.RetryPolicy{MaxAttempts: 2, Initial: time.Millisecond, Max: time.Second}, 150 * time.Millisecond, 150 * time.Millisecond},
		{time.Hour, run.RetryPolicy{MaxAttempts: 2, Initial: time.Millisecond, Max: 50 * time.Millisecond}, 50 * time.Millisecond, 50 * time.Millisecond},
		{0, run.RetryPolicy{MaxAttempts: 2, Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.2}, 80 * time.Millisecond, 120 * time.Millisecond},
	} {
		col, _ := d.collector(t, failing(c.after), c.pol)
		waits, _, err := attemptsUntilDone(t, col, ProjectCreated{ProjectID: fmt.Sprintf("p-wait-%d", i), Targets: []Target{{Platform: "x"}}}, 30)
		if err != nil {
			t.Fatalf("after %v: last attempt %v, want the project sealed without the target", c.after, err)
		}
		if len(waits) != 1 || waits[0] < c.min || waits[0] > c.max {
			t.Errorf("RetryAfter %v with %+v: waits %v, want one within [%v, %v]", c.after, c.pol, waits, c.min, c.max)
		}
	}
}

// The synthetic crawler injects transient failures (fail=N, per project
// and target), permanent ones (fail=permanent), after fail_after items.
func TestSyntheticCrawlerInjectsFailures(t *testing.T) {
	t.Parallel()
	c := &SyntheticCrawler{}
	crawl := func(project, url string) (int, error) {
		n := 0
		err := c.Crawl(context.Background(), ProjectCreated{ProjectID: project}, Target{Platform: "tiktok", URL: url}, func(Item) error { n++; return nil })
		return n, err
	}
	const twice = "synthetic://tiktok?items=5&fail=2&fail_after=2"
	for i := 1; i <= 2; i++ {
		n, err := crawl("p1", twice)
		if _, ok := transientCrawl(err); !ok || !errors.Is(err, ErrInjected) || n != 2 {
			t.Fatalf("crawl %d: %d items, err %v; want 2 items and a transient injected error", i, n, err)
		}
	}
	if n, err := crawl("p1", twice); err != nil || n != 5 {
		t.Fatalf("crawl 3: %d items, err %v; want all 5", n, err)
	}
	if _, err := crawl("p2", twice); err == nil {
		t.Fatal("another project's crawl of the same target must fail on its own count")
	}
	for range 2 {
		n, err := crawl("p1", "synthetic://tiktok?items=3&fail=permanent")
		if _, ok := transientCrawl(err); ok || !errors.Is(err, ErrInjected) || n != 0 {
			t.Fatalf("fail=permanent: %d items, err %v; want none and a permanent injected error", n, err)
		}
	}
	for _, bad := range []string{"synthetic://x?fail=-1", "synthetic://x?fail=often", "synthetic://x?fail=1&fail_after=x"} {
		if _, err := crawl("p1", bad); err == nil || errors.Is(err, ErrInjected) {
			t.Errorf("%s: err %v, want a bad-parameter error", bad, err)
		}
	}
}

// The HTTP crawler classifies its failures: 5xx (but 501), 408 and 429 and
// broken connections are transient — a Retry-After becomes the wait —,
// other statuses, a body too large and a bad URL are permanent.
func TestHTTPCrawlerClassifiesFailures(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	status := func(code int, retryAfter string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			w.WriteHeader(code)
		}
	}
	mux.Handle("/503", status(503, "7"))
	mux.Handle("/500", status(500, ""))
	mux.Handle("/429", status(429, "bogus"))
	mux.Handle("/408", status(408, ""))
	mux.Handle("/501", status(501, ""))
	mux.Handle("/404", status(404, "5"))
	mux.Handle("/403", status(403, ""))
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(make([]byte, 4096)) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	})
	mux.HandleFunc("/cut", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "1000")
		_, _ = w.Write([]byte("short"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	closed := httptest.NewServer(mux)
	closedURL := closed.URL
	closed.Close() // connection refused

	c := &HTTPCrawler{Timeout: 200 * time.Millisecond, MaxBytes: 1024, HostDelay: time.Millisecond}
	for _, tc := range []struct {
		url       string
		transient bool
		after     time.Duration
	}{
		{srv.URL + "/503", true, 7 * time.Second},
		{srv.URL + "/500", true, 0},
		{srv.URL + "/429", true, 0},
		{srv.URL + "/408", true, 0},
		{srv.URL + "/slow", true, 0},
		{srv.URL + "/cut", true, 0},
		{closedURL + "/page", true, 0},
		{srv.URL + "/501", false, 0},
		{srv.URL + "/404", false, 0},
		{srv.URL + "/403", false, 0},
		{srv.URL + "/big", false, 0},
		{"ftp://example.com/x", false, 0},
	} {
		err := c.Crawl(context.Background(), ProjectCreated{}, Target{Platform: "news", URL: tc.url}, func(Item) error { return nil })
		if err == nil {
			t.Errorf("%s: no error", tc.url)
			continue
		}
		after, transient := transientCrawl(err)
		if transient != tc.transient || after != tc.after {
			t.Errorf("%s: transient %t after %v (%v), want transient %t after %v", tc.url, transient, after, err, tc.transient, tc.after)
		}
	}
}

// End to end: a target that fails transiently twice (after two items) and
// then succeeds is collected whole — every item stored, announced and
// counted once — and the project completes with errors=0; a target that
// fails permanently and one that fails transiently on every attempt are
// skipped and each counted once in smap_crawl_errors_total, and neither
// changes the progress counts beyond the items found before failing.
func testCrawlRetries(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	h.cfg.CrawlRetry = run.RetryPolicy{MaxAttempts: 3, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	d := h.start(h.cfg)
	const id = "p-crawl-retry"
	h.createProject(ProjectCreated{ProjectID: id, Keywords: []string{"VF3"}, Targets: []Target{
		{Platform: "tiktok", URL: "synthetic://tiktok?items=5&fail=2&fail_after=2"},
		{Platform: "facebook", URL: "synthetic://facebook?items=3&fail=permanent&fail_after=1"},
		{Platform: "youtube", URL: "synthetic://youtube?items=4&fail=100"},
	}})
	st := h.waitDone(id, 30*time.Second)
	// 5 tiktok items + the 1 facebook item found before its failure.
	if st.Total != 6 || st.Done != 6 || st.Errors != 0 {
		t.Fatalf("final state %+v, want total=done=6 errors=0", st)
	}
	if cs := h.completions(id); len(cs) != 1 || cs[0].Total != 6 || cs[0].Errors != 0 {
		t.Fatalf("completions %+v, want one with total 6, errors 0", cs)
	}
	ctx := testkit.Context(t)
	announced := map[string]bool{}
	for _, r := range h.k.ReadTopic(t, h.cfg.DataCollectedTopic) {
		e, err := DecodeDataCollected(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		announced[e.Payload.ItemID] = true
	}
	for i := range 5 {
		itemID := ItemID(id, "tiktok", fmt.Sprintf("tiktok-%05d", i))
		if !announced[itemID] {
			t.Errorf("tiktok item %d (%s) not announced on data.collected", i, itemID)
		}
		if _, err := h.objects.Get(ctx, ObjectKey("tiktok", itemID)); err != nil {
			t.Errorf("tiktok item %d: raw object: %v", i, err)
		}
	}
	if len(announced) != 6 {
		t.Errorf("%d distinct items announced, want 6", len(announced))
	}
	if rows, failed := h.rows(id); rows != 6 || failed != 0 {
		t.Errorf("post_analytics: %d rows, %d failed; want 6, 0", rows, failed)
	}
	for platform, want := range map[string]float64{"tiktok": 0, "facebook": 1, "youtube": 1} {
		if v := testkit.Metric(t, d.reg, "smap_crawl_errors_total", "platform", platform); v != want {
			t.Errorf("smap_crawl_errors_total{platform=%s} = %v, want %v", platform, v, want)
		}
	}
	for platform, want := range map[string]float64{"tiktok": 2, "facebook": 0, "youtube": 2} {
		if v := testkit.Metric(t, d.reg, "smap_crawl_retries_total", "platform", platform); v != want {
			t.Errorf("smap_crawl_retries_total{platform=%s} = %v, want %v", platform, v, want)
		}
	}
	if n := h.count(h.cfg.AnalyticsErrorsTopic); n != 0 {
		t.Errorf("%d DLQ records, want none", n)
	}
}
