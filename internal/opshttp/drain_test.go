package opshttp_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/opshttp"
)

// The serve channel yields only once shutdown has drained in-flight
// requests: `sluice run` returns (and the process exits) when it yields, so
// a request that is still being answered — an API call mounted by a
// pipeline, a scrape — must finish first.
func TestShutdownDrainsInFlightRequests(t *testing.T) {
	s := opshttp.New(prometheus.NewRegistry(), nil)
	started, release := make(chan struct{}), make(chan struct{})
	s.Handle("GET /api/v1/slow", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(started)
		<-release
		io.WriteString(w, "done")
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, errc, err := s.ListenAndServe(ctx, opshttp.Listen{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		code int
		body string
		err  error
	}
	resc := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + addr.String() + "/api/v1/slow")
		if err != nil {
			resc <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		resc <- result{resp.StatusCode, string(b), err}
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("request never reached the handler")
	}
	cancel()
	select {
	case err := <-errc:
		t.Fatalf("serve channel yielded (%v) while a request was still in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	r := <-resc
	if r.err != nil || r.code != 200 || r.body != "done" {
		t.Fatalf("in-flight request during shutdown = %d %q %v, want 200 done", r.code, r.body, r.err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("serve returned %v after a clean shutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve channel never yielded after the drain")
	}
}

// A readiness check that panics counts as failing; it must not leave
// /readyz (and AddReadiness) locked for good.
func TestReadinessCheckPanics(t *testing.T) {
	s := opshttp.New(prometheus.NewRegistry(), nil)
	s.AddReadiness("ok", func() bool { return true })
	s.AddReadiness("broken", func() bool { panic("boom") })
	h := s.Handler()
	for range 2 {
		done := make(chan struct{})
		var code int
		var body string
		go func() {
			defer close(done)
			defer func() { _ = recover() }()
			code, body = get(t, h, "/readyz")
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("/readyz hangs after a readiness check panicked")
		}
		if code != http.StatusServiceUnavailable || body != "not ready: broken\n" {
			t.Fatalf("/readyz = %d %q, want 503 naming broken", code, body)
		}
	}
	added := make(chan struct{})
	go func() { s.AddReadiness("late", func() bool { return true }); close(added) }()
	select {
	case <-added:
	case <-time.After(10 * time.Second):
		t.Fatal("AddReadiness hangs after a readiness check panicked")
	}
}
