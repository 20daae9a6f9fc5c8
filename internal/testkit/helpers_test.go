package testkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// inSubtest runs f through record on a subtest of t and returns the
// recordingTB once the subtest has ended, that is after the cleanups f
// registered have run.
func inSubtest(t *testing.T, name string, f func(tb testing.TB)) *recordingTB {
	t.Helper()
	var r *recordingTB
	t.Run(name, func(t *testing.T) { r = record(t, f) })
	return r
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	calls := 0
	r := record(t, func(tb testing.TB) {
		WaitFor(tb, 10*time.Second, "the third call", func() bool { calls++; return calls == 3 })
	})
	if calls != 3 || r.failed || len(r.errs()) != 0 {
		t.Errorf("cond true on the third call: %d calls, failed %v (%q), errors %q; want 3 calls and no failure", calls, r.failed, r.msg, r.errs())
	}

	calls = 0
	start := time.Now()
	r = record(t, func(tb testing.TB) {
		WaitFor(tb, 100*time.Millisecond, "the impossible", func() bool { calls++; return false })
	})
	if want := "timed out after 100ms waiting for the impossible"; !r.failed || r.msg != want {
		t.Errorf("failed %v with %q, want a failure with %q", r.failed, r.msg, want)
	}
	if took := time.Since(start); took < 100*time.Millisecond || took > 5*time.Second {
		t.Errorf("gave up after %s, want just over 100ms", took)
	}
	if calls < 3 {
		t.Errorf("cond called %d times in 100ms, want it polled", calls)
	}
}

func TestRunInBackground(t *testing.T) {
	t.Parallel()
	errExit := errors.New("exit error")
	untilCancel := func(ret error) func(ctx context.Context) error {
		return func(ctx context.Context) error { <-ctx.Done(); return ret }
	}

	for _, ret := range []error{nil, errExit} {
		r := inSubtest(t, fmt.Sprintf("stop returns %v", ret), func(tb testing.TB) {
			stop := RunInBackground(tb, "worker", untilCancel(ret))
			if err := stop(); err != ret {
				t.Errorf("stop() = %v, want %v", err, ret)
			}
			if err := stop(); err != ret {
				t.Errorf("second stop() = %v, want %v again", err, ret)
			}
		})
		if len(r.errs()) != 0 || r.failed {
			t.Errorf("run returning %v after stop: errors %q, failed %v; want none (the caller owns stop's result)", ret, r.errs(), r.failed)
		}
	}

	var stop func() error
	r := inSubtest(t, "run returns on its own", func(tb testing.TB) {
		stop = RunInBackground(tb, "worker", func(context.Context) error { return errors.New("boom") })
		WaitFor(t, 10*time.Second, "the early-stop report", func() bool { return len(tb.(*recordingTB).errs()) > 0 })
	})
	if got, want := r.errs(), []string{"worker stopped on its own: boom"}; !slices.Equal(got, want) {
		t.Errorf("errors %q, want %q (reported once, not again by cleanup)", got, want)
	}
	if err := stop(); err == nil || err.Error() != "boom" {
		t.Errorf("stop() = %v, want boom", err)
	}

	for _, tc := range []struct {
		ret  error
		want []string
	}{
		{nil, nil},
		{errExit, []string{"stopping worker: exit error"}},
	} {
		var ctx context.Context
		r := inSubtest(t, fmt.Sprintf("cleanup stops a run returning %v", tc.ret), func(tb testing.TB) {
			started := make(chan struct{})
			RunInBackground(tb, "worker", func(c context.Context) error { ctx = c; close(started); <-c.Done(); return tc.ret })
			<-started
			if ctx.Err() != nil {
				t.Error("context cancelled before cleanup")
			}
		})
		if ctx.Err() == nil {
			t.Error("cleanup did not cancel the run's context")
		}
		if got := r.errs(); !slices.Equal(got, tc.want) {
			t.Errorf("run returning %v at cleanup: errors %q, want %q", tc.ret, got, tc.want)
		}
	}

	release := make(chan struct{})
	defer close(release)
	r = inSubtest(t, "stop gives up after the bound", func(tb testing.TB) {
		stop := runInBackground(tb, "stubborn", 50*time.Millisecond, func(context.Context) error { <-release; return nil })
		start := time.Now()
		if err := stop(); err == nil || err.Error() != "stubborn did not stop within 50ms" {
			t.Errorf("stop() = %v, want stubborn did not stop within 50ms", err)
		}
		if took := time.Since(start); took < 50*time.Millisecond || took > 5*time.Second {
			t.Errorf("stop returned after %s, want just over 50ms", took)
		}
	})
	if len(r.errs()) != 0 {
		t.Errorf("errors %q, want none", r.errs())
	}
}

func TestMetric(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"a", "b"})
	c.WithLabelValues("x", "1").Add(1)
	c.WithLabelValues("x", "2").Add(2)
	c.WithLabelValues("y", "1").Add(4)
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g", Help: "g"}, []string{"a"})
	g.WithLabelValues("x").Set(2.5)
	g.WithLabelValues("y").Set(-1)
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h", Help: "h"}, []string{"a"})
	for _, v := range []float64{0.1, 3, 100} {
		h.WithLabelValues("x").Observe(v)
	}
	h.WithLabelValues("y").Observe(1)
	s := prometheus.NewSummary(prometheus.SummaryOpts{Name: "s", Help: "s"})
	s.Observe(1)
	s.Observe(2)
	u := prometheus.NewUntypedFunc(prometheus.UntypedOpts{Name: "u", Help: "u"}, func() float64 { return 7 })
	reg.MustRegister(c, g, h, s, u)
	// A wrapped registerer adds a constant label, as the runtime does.
	prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": "p"}, reg).MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "w_total", Help: "w"}, func() float64 { return 5 }))

	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"c_total", nil, 7},
		{"c_total", []string{"a", "x"}, 3},
		{"c_total", []string{"a", "x", "b", "2"}, 2},
		{"c_total", []string{"b", "1"}, 5},
		{"c_total", []string{"a", "z"}, 0},
		{"c_total", []string{"missing", "x"}, 0},
		{"g", nil, 1.5},
		{"g", []string{"a", "y"}, -1},
		{"h", nil, 4},
		{"h", []string{"a", "x"}, 3},
		{"s", nil, 2},
		{"u", nil, 7},
		{"w_total", []string{"pipeline", "p"}, 5},
		{"w_total", []string{"pipeline", "q"}, 0},
		{"no_such_family", nil, 0},
	} {
		if got := Metric(t, reg, tc.name, tc.labels...); got != tc.want {
			t.Errorf("Metric(%s, %q) = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}

	r := record(t, func(tb testing.TB) { Metric(tb, reg, "c_total", "a") })
	if !r.failed || !strings.Contains(r.msg, "not name/value pairs") {
		t.Errorf("odd labels: failed %v with %q, want a failure naming the pairs", r.failed, r.msg)
	}
}

// ListenAddr returns a bindable loopback address outside the ephemeral
// port range.
func TestListenAddr(t *testing.T) {
	t.Parallel()
	addr := ListenAddr(t)
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := strconv.Atoi(port); p < listenPortMin || p >= listenPortMax {
		t.Fatalf("port %d outside [%d, %d)", p, listenPortMin, listenPortMax)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	ln.Close()
}
