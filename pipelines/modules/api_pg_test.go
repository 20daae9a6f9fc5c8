package modules

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/pipelines"
)

// apiServer serves f's assembler's routes.
func apiServer(t *testing.T, f *assembleFixture) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	for pattern, h := range f.asm.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// call sends method path body and returns the status and decoded body.
func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: HTTP %d, body %s: %v", method, path, resp.StatusCode, b, err)
	}
	return resp.StatusCode, m
}

// Each bad input is answered 400 with the rule it fails; nothing is
// produced.
func TestAPIBadInput(t *testing.T) {
	t.Parallel()
	f := newAssembleFixture(t, AssembleConfig{})
	if _, err := f.pool.Exec(f.ctx, `UPDATE analysis_catalog SET enabled = false WHERE module_id = 'price_action'`); err != nil {
		t.Fatal(err)
	}
	srv := apiServer(t, f)
	for _, c := range []struct {
		method, path, body, rule string
	}{
		{"POST", "/api/v1/modules/refresh", `not json`, ""},
		{"POST", "/api/v1/modules/refresh", `[1]`, ""},
		{"POST", "/api/v1/modules/refresh", `{"module":"options_flow"}`, RuleTicker},
		{"POST", "/api/v1/modules/refresh", `{"ticker":7,"module":"options_flow"}`, RuleTicker},
		{"POST", "/api/v1/modules/refresh", `{"ticker":"9X","module":"options_flow"}`, RuleTicker},
		{"POST", "/api/v1/modules/refresh", `{"ticker":"NVDA"}`, RuleModule},
		{"POST", "/api/v1/modules/refresh", `{"ticker":"NVDA","module":"Options-Flow"}`, RuleModule},
		{"POST", "/api/v1/modules/refresh", `{"ticker":"NVDA","module":"options_flow","force":"yes"}`, RuleRequest},
		{"POST", "/api/v1/modules/refresh", `{"ticker":"NVDA","module":"options_flow","job_id":"j-1"}`, RuleRequest},
		{"POST", "/api/v1/modules/refresh", `{"ticker":"NVDA","module":"nope"}`, RuleUnknownModule},
		{"POST", "/api/v1/modules/refresh", `{"ticker":"NVDA","module":"price_action"}`, RuleUnknownModule},
		{"POST", "/ingest/options-flow", ``, RuleTicker},
		{"POST", "/ingest/options-flow?ticker=NVDA&force=maybe", ``, RuleRequest},
		{"POST", "/ingest/no-such-module?ticker=NVDA", ``, RuleUnknownModule},
		{"GET", "/api/v1/modules/status", ``, RuleTicker},
		{"GET", "/api/v1/modules/status?ticker=NVDA&module=nope", ``, RuleUnknownModule},
		{"POST", "/api/v1/modules/analysis", `nope`, ""},
		{"POST", "/api/v1/modules/analysis", `{"modules":["dark_pool"]}`, RuleTicker},
		{"POST", "/api/v1/modules/analysis", `{"ticker":["NVDA"]}`, RuleTicker},
		{"POST", "/api/v1/modules/analysis", `{"ticker":"NVDA","modules":"dark_pool"}`, RuleModule},
		{"POST", "/api/v1/modules/analysis", `{"ticker":"NVDA","modules":["dark pool"]}`, RuleModule},
		{"POST", "/ai/ticker-activity-analysis", `{"ticker":"NVDA","modules":["nope"]}`, RuleUnknownModule},
		{"GET", "/api/v1/modules/jobs/not-a-uuid", ``, RuleRequest},
	} {
		code, body := call(t, srv, c.method, c.path, c.body)
		if code != http.StatusBadRequest || body["rule"] != c.rule || body["error"] == "" {
			t.Errorf("%s %s %s: HTTP %d %v, want 400 rule %q", c.method, c.path, c.body, code, body, c.rule)
		}
	}
	if code, body := call(t, srv, "GET", "/api/v1/modules/jobs/"+uuid.NewString(), ""); code != http.StatusNotFound {
		t.Errorf("unknown job: HTTP %d %v, want 404", code, body)
	}
	if reqs := f.requests(t); len(reqs) != 0 {
		t.Errorf("bad input produced %v", reqs)
	}
}

// A fresh module is answered 200 with its state and not refreshed unless
// forced; other modules are answered 202 once the request is produced, by
// the route and its alias; status, analysis and job routes answer.
func TestAPIRoutes(t *testing.T) {
	t.Parallel()
	f := newAssembleFixture(t, AssembleConfig{})
	f.seed(t, "MSFT", ModuleOptionsFlow, time.Minute)
	srv := apiServer(t, f)

	code, body := call(t, srv, "POST", "/api/v1/modules/refresh", `{"ticker":"msft","module":"options_flow"}`)
	if st, _ := body["state"].(map[string]any); code != http.StatusOK || body["accepted"] != false || st["freshness"] != "fresh" {
		t.Errorf("fresh: HTTP %d %v", code, body)
	}
	code, body = call(t, srv, "POST", "/api/v1/modules/refresh", `{"ticker":"msft","module":"options_flow","force":true}`)
	if code != http.StatusAccepted || body["accepted"] != true || body["key"] != "MSFT:options_flow" {
		t.Errorf("forced: HTTP %d %v", code, body)
	}
	code, body = call(t, srv, "POST", "/ingest/dark-pool?ticker=msft", ``)
	if st, _ := body["state"].(map[string]any); code != http.StatusAccepted || body["key"] != "MSFT:dark_pool" || st["freshness"] != "absent" {
		t.Errorf("alias: HTTP %d %v", code, body)
	}
	reqs := f.requests(t)
	if of, dp := reqs["MSFT:options_flow"], reqs["MSFT:dark_pool"]; len(reqs) != 2 || len(of) != 1 || !of[0].Force ||
		of[0].Reason != ReasonAPI || len(dp) != 1 || dp[0].Force || dp[0].Ticker != "MSFT" {
		t.Errorf("requests %v", reqs)
	}

	code, body = call(t, srv, "GET", "/api/v1/modules/status?ticker=msft", "")
	if mods, _ := body["modules"].([]any); code != http.StatusOK || body["ticker"] != "MSFT" || len(mods) != 4 {
		t.Errorf("status: HTTP %d %v", code, body)
	}
	code, body = call(t, srv, "POST", "/ai/ticker-activity-analysis", `{"ticker":"MSFT","modules":["options_flow","dark_pool"]}`)
	job, _ := body["job"].(map[string]any)
	if code != http.StatusOK || job == nil || job["created"] != true || body["synthesis"] == nil {
		t.Fatalf("analysis: HTTP %d %v", code, body)
	}
	code, body = call(t, srv, "GET", "/api/v1/modules/jobs/"+strings.ToUpper(job["job_id"].(string)), "")
	if mods, _ := body["modules"].([]any); code != http.StatusOK || body["job_id"] != job["job_id"] || body["status"] != "pending" || len(mods) != 1 {
		t.Errorf("job: HTTP %d %v", code, body)
	}
}

// Concurrent refresh requests of one key are all answered and all
// produced: deduplication is the refresh group's gate.
func TestAPIConcurrentRefresh(t *testing.T) {
	t.Parallel()
	f := newAssembleFixture(t, AssembleConfig{})
	srv := apiServer(t, f)
	const n = 50
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := srv.Client().Post(srv.URL+"/api/v1/modules/refresh", "application/json",
				strings.NewReader(`{"ticker":"AMD","module":"short_interest"}`))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusAccepted {
			t.Errorf("request %d: HTTP %d", i, c)
		}
	}
	reqs := f.requests(t)
	ids := map[string]bool{}
	for _, r := range reqs["AMD:short_interest"] {
		ids[r.RequestID] = true
	}
	if len(reqs) != 1 || len(reqs["AMD:short_interest"]) != n || len(ids) != n {
		t.Errorf("%d requests (%d ids) on %d keys, want %d on one", len(reqs["AMD:short_interest"]), len(ids), len(reqs), n)
	}
}

// MountAPI mounts the routes on the ops server, producing with a client of
// its own that the resources close.
func TestMountAPI(t *testing.T) {
	t.Parallel()
	f := newAssembleFixture(t, AssembleConfig{})
	ops := opshttp.New(f.reg, slog.New(slog.DiscardHandler))
	var res pipelines.Resources
	defer res.Close()
	env := pipelines.Env{Kafka: f.kafka.Opts(t), DB: f.pool, Registerer: f.reg, Ops: ops}
	if err := MountAPI(env, AssembleConfig{RefreshTopic: f.topic}, &res); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ops.Handler())
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL+"/ingest/price-action?ticker=ibm", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || len(f.requests(t)["IBM:price_action"]) != 1 {
		t.Errorf("HTTP %d, requests %v", resp.StatusCode, f.requests(t))
	}
	if err := MountAPI(pipelines.Env{Ops: ops}, AssembleConfig{}, &res); err == nil {
		t.Error("MountAPI without a database succeeded")
	}
}

func TestParseAssembleBudget(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]time.Duration{"": DefaultAssembleBudget, "750ms": 750 * time.Millisecond, "0s": 0, "-1s": 0, "soon": 0} {
		got, err := ParseAssembleBudget(func(string) string { return v })
		if got != want || (want == 0) != (err != nil) {
			t.Errorf("%q: %v, %v; want %v", v, got, err, want)
		}
	}
}
