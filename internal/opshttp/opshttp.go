// Package opshttp serves the operational HTTP endpoints of a sluice process:
// /metrics (Prometheus), /healthz (the process is alive) and /readyz (every
// registered readiness check passes). Pipelines may mount extra routes (for
// example an ingest trigger) on the same server with Handle.
package opshttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server is the ops HTTP server. It is safe for concurrent use.
type Server struct {
	mux    *http.ServeMux
	mu     sync.Mutex
	checks map[string]func() bool
	log    *slog.Logger
}

// New returns a server exposing the metrics gathered by g.
func New(g prometheus.Gatherer, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{mux: http.NewServeMux(), checks: map[string]func() bool{}, log: log}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	s.mux.HandleFunc("GET /readyz", s.ready)
	return s
}

// AddReadiness registers a named readiness check; /readyz answers 200 only
// when every check returns true.
func (s *Server) AddReadiness(name string, ok func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[name] = ok
}

// Handle mounts an extra route (Go 1.22 pattern syntax, e.g. "POST /api/v1/x").
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Handler returns the server's handler (for tests).
func (s *Server) Handler() http.Handler { return s.mux }

func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	names := make([]string, 0, len(s.checks))
	for n := range s.checks {
		names = append(names, n)
	}
	sort.Strings(names)
	var failing []string
	for _, n := range names {
		if !s.checks[n]() {
			failing = append(failing, n)
		}
	}
	s.mu.Unlock()
	if len(names) == 0 || len(failing) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		if len(names) == 0 {
			fmt.Fprintln(w, "not ready: nothing registered")
			return
		}
		fmt.Fprintf(w, "not ready: %s\n", strings.Join(failing, ", "))
		return
	}
	fmt.Fprintln(w, "ready")
}

// ListenAndServe serves on addr until ctx is done, then shuts down within 5 s.
// It returns once the listener is bound or failed, serving in the background;
// the returned channel yields the serve error (nil after a clean shutdown).
func (s *Server) ListenAndServe(ctx context.Context, addr string) (net.Addr, <-chan error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("ops http listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		errc <- err
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	s.log.Info("ops http listening", "addr", ln.Addr().String())
	return ln.Addr(), errc, nil
}
