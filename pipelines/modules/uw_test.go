package modules

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

const testUWKey = "uw-secret-key-123"

// fakeUW is a local stand-in for the Unusual Whales API: it checks the
// bearer token and answers each path with the response set for it.
type fakeUW struct {
	mu      sync.Mutex
	answers map[string]func(w http.ResponseWriter, r *http.Request)
	seen    []string // request paths, in order
}

func (f *fakeUW) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.seen = append(f.seen, r.URL.Path)
	answer := f.answers[r.URL.Path]
	f.mu.Unlock()
	if r.Method != http.MethodGet || r.Header.Get("Accept") != "application/json" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+testUWKey {
		http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
		return
	}
	if answer == nil {
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
		return
	}
	answer(w, r)
}

func newFakeUW(t *testing.T) (*fakeUW, *UW) {
	t.Helper()
	f := &fakeUW{answers: map[string]func(http.ResponseWriter, *http.Request){}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	now := time.Date(2025, 1, 6, 14, 0, 0, 0, time.UTC)
	u, err := NewUW(UWConfig{BaseURL: srv.URL + "/", APIKey: testUWKey, Client: srv.Client(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return f, u
}

func (f *fakeUW) answer(path string, status int, header map[string]string, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[path] = func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
}

func TestUWFetch(t *testing.T) {
	t.Parallel()
	f, u := newFakeUW(t)
	f.answer("/api/stock/NVDA/flow-recent", 200, nil, `{"data":[{"premium":"1000.5"}]}`)
	f.answer("/api/darkpool/NVDA", 200, nil, `{"data":[]}`)
	f.answer("/api/shorts/NVDA/interest-float", 200, nil, `{"data":{"si":1}}`)
	f.answer("/api/stock/BRK.B/ohlc/5m", 200, nil, `{"data":[]}`)
	for _, tc := range []struct{ ticker, module, want string }{
		{"nvda", ModuleOptionsFlow, `{"data":[{"premium":"1000.5"}]}`},
		{"NVDA", ModuleDarkPool, `{"data":[]}`},
		{"NVDA", ModuleShortInterest, `{"data":{"si":1}}`},
		{"brk.b", ModulePriceAction, `{"data":[]}`},
	} {
		snap, err := u.Fetch(context.Background(), tc.ticker, tc.module)
		if err != nil || string(snap.Payload) != tc.want || snap.DataDate != "" {
			t.Errorf("%s %s = %s %q, %v", tc.ticker, tc.module, snap.Payload, snap.DataDate, err)
		}
	}
	want := []string{"/api/stock/NVDA/flow-recent", "/api/darkpool/NVDA", "/api/shorts/NVDA/interest-float", "/api/stock/BRK.B/ohlc/5m"}
	if strings.Join(f.seen, " ") != strings.Join(want, " ") {
		t.Errorf("requests %v, want %v", f.seen, want)
	}
	if _, err := u.Fetch(context.Background(), "NVDA", "insider_trades"); !errors.Is(err, ErrUnsupportedModule) {
		t.Errorf("unknown module: %v", err)
	}
	if len(f.seen) != len(want) {
		t.Error("an unknown module reached the upstream")
	}
}

func TestUWErrors(t *testing.T) {
	t.Parallel()
	f, u := newFakeUW(t)
	f.answer("/api/stock/RL/flow-recent", 429, map[string]string{"Retry-After": "7"}, `slow down`)
	f.answer("/api/stock/RLD/flow-recent", 429, map[string]string{"Retry-After": "Mon, 06 Jan 2025 14:00:30 GMT"}, ``)
	f.answer("/api/stock/RLX/flow-recent", 429, map[string]string{"Retry-After": "soon"}, ``)
	f.answer("/api/stock/RLH/flow-recent", 429, map[string]string{"Retry-After": "99999999999999999"}, ``)
	f.answer("/api/stock/DOWN/flow-recent", 503, nil, `maintenance`)
	f.answer("/api/stock/BAD/flow-recent", 422, nil, `{"error":"invalid ticker `+testUWKey+`"}`)
	f.answer("/api/stock/HTML/flow-recent", 200, nil, `<html>ok</html>`)
	f.answer("/api/stock/BIG/flow-recent", 200, nil, `"`+strings.Repeat("x", MaxPayloadBytes)+`"`)
	f.answer("/api/stock/MAX/flow-recent", 200, nil, `"`+strings.Repeat("x", MaxPayloadBytes-2)+`"`)
	for _, tc := range []struct {
		ticker string
		kind   stages.Kind
		rule   string
		after  time.Duration
	}{
		{"RL", stages.KindWait, "", 7 * time.Second},
		{"RLD", stages.KindWait, "", 30 * time.Second},
		{"RLX", stages.KindWait, "", DefaultRateLimitWait},
		{"RLH", stages.KindWait, "", 24 * time.Hour}, // no overflow
		{"DOWN", stages.KindRetry, RuleUpstream, 0},
		{"BAD", stages.KindDeadLetter, RuleUpstreamRejected, 0},
		{"NONE", stages.KindDeadLetter, RuleUpstreamRejected, 0}, // 404
		{"HTML", stages.KindDeadLetter, RuleUpstreamRejected, 0},
		{"BIG", stages.KindDeadLetter, RuleSnapshotTooLarge, 0},
	} {
		_, err := u.Fetch(context.Background(), tc.ticker, ModuleOptionsFlow)
		c := stages.Classify(ClassifyUpstreamError(err))
		if err == nil || c.Kind != tc.kind || c.Rule != tc.rule || c.After != tc.after {
			t.Errorf("%s: %v classified %+v", tc.ticker, err, c)
		}
		if err != nil && strings.Contains(err.Error(), testUWKey) {
			t.Errorf("%s: the error shows the API key: %v", tc.ticker, err)
		}
	}
	if snap, err := u.Fetch(context.Background(), "MAX", ModuleOptionsFlow); err != nil || len(snap.Payload) != MaxPayloadBytes {
		t.Errorf("a payload of exactly 4 MiB: %d bytes, %v", len(snap.Payload), err)
	}

	// A wrong key is fatal and not shown.
	bad, err := NewUW(UWConfig{BaseURL: strings.TrimSuffix(u.base.String(), "/"), APIKey: "wrong-key", Client: u.client})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Fetch(context.Background(), "NVDA", ModuleOptionsFlow)
	if c := stages.Classify(ClassifyUpstreamError(err)); c.Kind != stages.KindFatal || strings.Contains(err.Error(), "wrong-key") {
		t.Errorf("wrong key: %v (%+v)", err, c)
	}
}

// The call ends with its context (the refresh bounds it with
// UpstreamTimeout); a deadline is retried, a cancellation returned as is.
func TestUWContext(t *testing.T) {
	t.Parallel()
	f, u := newFakeUW(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.mu.Lock()
	f.answers["/api/stock/SLOW/flow-recent"] = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := u.Fetch(ctx, "SLOW", ModuleOptionsFlow)
	if !errors.Is(err, context.Canceled) || ClassifyUpstreamError(err) != err {
		t.Errorf("cancelled: %v", err)
	}
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now())
	defer dcancel()
	_, err = u.Fetch(dctx, "SLOW", ModuleOptionsFlow)
	if c := stages.Classify(ClassifyUpstreamError(err)); !errors.Is(err, context.DeadlineExceeded) || c.Kind != stages.KindRetry || c.Rule != RuleUpstream {
		t.Errorf("deadline: %v (%+v)", err, c)
	}
}

func TestNewUW(t *testing.T) {
	t.Parallel()
	for _, cfg := range []UWConfig{
		{BaseURL: "https://api.example.com"},                       // no key
		{BaseURL: "ftp://api.example.com", APIKey: "k"},            // scheme
		{BaseURL: "https://api.example.com/?token=1", APIKey: "k"}, // query
		{BaseURL: "api.example.com", APIKey: "k"},                  // no scheme
	} {
		if _, err := NewUW(cfg); err == nil {
			t.Errorf("NewUW(%+v) accepted", cfg)
		}
	}
	u, err := NewUW(UWConfig{APIKey: "k"})
	if err != nil || u.base.String() != DefaultUWBaseURL || u.client.Timeout != UpstreamTimeout {
		t.Errorf("defaults: %+v, %v", u, err)
	}
}
