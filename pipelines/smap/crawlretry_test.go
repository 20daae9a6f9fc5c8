package smap

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages/run"
)

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

func TestRetryAfterHeader(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"30":                            30 * time.Second,
		" 2 ":                           2 * time.Second,
		"-3":                            0,
		"soon":                          0,
		"999999999999":                  24 * time.Hour,
		"Sat, 01 Mar 2025 12:01:00 GMT": time.Minute,
		"Sat, 01 Mar 2025 11:00:00 GMT": 0,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, got, want)
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
