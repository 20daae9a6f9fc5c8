// Package opshttp serves the operational HTTP endpoints of a sluice process:
// /metrics (Prometheus), /healthz (the process is alive) and /readyz (every
// registered readiness check passes). Pipelines may mount extra routes (for
// example an ingest trigger) on the same server with Handle; those are
// guarded by the access rules of Listen (Host check, and for writes: same
// origin, bearer token, JSON content type).
package opshttp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
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

// AddReadiness registers a named readiness check (replacing one of the same
// name); /readyz answers 200 only when every check returns true. A check
// that panics counts as failing.
func (s *Server) AddReadiness(name string, ok func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[name] = ok
}

// Handle mounts an extra route (Go 1.22 pattern syntax, e.g. "POST /api/v1/x").
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Handler returns the routes without the access rules ListenAndServe puts
// in front of them (for tests of the routes themselves).
func (s *Server) Handler() http.Handler { return s.mux }

func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	// Run the checks outside the lock: a slow or panicking check must not
	// block the other requests or AddReadiness.
	s.mu.Lock()
	checks := maps.Clone(s.checks)
	s.mu.Unlock()
	names := slices.Sorted(maps.Keys(checks))
	var failing []string
	for _, n := range names {
		if !s.passes(n, checks[n]) {
			failing = append(failing, n)
		}
	}
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

// passes runs one readiness check; a check that panics fails.
func (s *Server) passes(name string, check func() bool) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("readiness check panicked", "check", name, "panic", p)
			ok = false
		}
	}()
	return check()
}

// shutdownWithin bounds how long ListenAndServe's shutdown waits for
// in-flight requests before it closes their connections.
const shutdownWithin = 5 * time.Second

// ListenAndServe checks l (see Listen.Check), serves on l.Addr behind l's
// access rules (HTTPS when l has a certificate) until ctx is done, then
// shuts down: it stops accepting connections and waits up to 5 s for
// in-flight requests to finish, then closes the connections still open. It
// returns once the listener is bound or failed, serving in the background;
// the returned channel yields once shutdown is complete (in-flight requests
// drained or cut), with the serve error or nil (a cut request is logged,
// not an error).
func (s *Server) ListenAndServe(ctx context.Context, l Listen) (net.Addr, <-chan error, error) {
	if err := l.Check(); err != nil {
		return nil, nil, err
	}
	var tlsConf *tls.Config
	if l.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(l.CertFile, l.KeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("ops http tls: load %s and %s: %w", l.CertFile, l.KeyFile, err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", l.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("ops http listen %s: %w", l.Addr, err)
	}
	// ReadHeaderTimeout stops clients that never finish their headers;
	// IdleTimeout closes keep-alive connections nobody uses any more.
	srv := &http.Server{Handler: newGuard(s.mux, l, ln.Addr(), s.log), TLSConfig: tlsConf,
		ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	served := make(chan error, 1)
	go func() {
		var err error
		if tlsConf != nil {
			err = srv.ServeTLS(ln, "", "") // the certificate is in TLSConfig
		} else {
			err = srv.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		served <- err
	}()
	errc := make(chan error, 1)
	go func() {
		// Serve returns as soon as Shutdown starts, before the in-flight
		// requests are answered: yield only after Shutdown returned.
		var err error
		stopped := false // Serve failed before ctx was done
		select {
		case err = <-served:
			stopped = true
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownWithin)
		defer cancel()
		if serr := srv.Shutdown(sctx); serr != nil {
			s.log.Warn("ops http: in-flight requests cut at shutdown", "after", shutdownWithin, "err", serr)
			_ = srv.Close()
		}
		if !stopped {
			err = <-served
		}
		if err != nil {
			err = fmt.Errorf("ops http serve %s: %w", ln.Addr(), err)
		}
		errc <- err
	}()
	s.log.Info("ops http listening", "addr", ln.Addr().String(), "tls", tlsConf != nil, "api_token", l.Token != "")
	return ln.Addr(), errc, nil
}
