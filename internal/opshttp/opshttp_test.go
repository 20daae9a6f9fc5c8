package opshttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/opshttp"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	s := opshttp.New(reg, nil)
	h := s.Handler()

	if code, body := get(t, h, "/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, _ := get(t, h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with no checks = %d, want 503", code)
	}
	var a, b atomic.Bool
	s.AddReadiness("alpha", a.Load)
	s.AddReadiness("beta", b.Load)
	a.Store(true)
	if code, body := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "beta") || strings.Contains(body, "alpha") {
		t.Fatalf("/readyz = %d %q, want 503 naming only beta", code, body)
	}
	b.Store(true)
	if code, _ := get(t, h, "/readyz"); code != 200 {
		t.Fatalf("/readyz = %d, want 200", code)
	}
	if code, body := get(t, h, "/metrics"); code != 200 || !strings.Contains(body, "sluice_test_total 3") {
		t.Fatalf("/metrics = %d, missing the counter:\n%s", code, body)
	}
	s.Handle("GET /api/v1/ping", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "pong") }))
	if code, body := get(t, h, "/api/v1/ping"); code != 200 || body != "pong" {
		t.Fatalf("mounted route = %d %q", code, body)
	}
}

func TestListenAndServeShutsDown(t *testing.T) {
	s := opshttp.New(prometheus.NewRegistry(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	addr, errc, err := s.ListenAndServe(ctx, opshttp.Listen{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("serve returned %v after shutdown", err)
	}
	if _, _, err := s.ListenAndServe(context.Background(), opshttp.Listen{Addr: "256.0.0.1:1", Open: true}); err == nil {
		t.Fatal("listening on an invalid address succeeded")
	}
}
