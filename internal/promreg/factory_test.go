package promreg_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/promreg"
)

// A Factory's collectors carry the name, help, label names and buckets
// given, and are registered as they are made.
func TestFactoryMakesAndRegisters(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f := promreg.Exclusive(reg)
	c := f.Counter("f_c_total", "C help.")
	cv := f.CounterVec("f_cv_total", "CV help.", "a", "b")
	g := f.Gauge("f_g", "G help.")
	gv := f.GaugeVec("f_gv", "GV help.", "a")
	h := f.Histogram("f_h_seconds", "H help.", []float64{1, 2})
	hv := f.HistogramVec("f_hv_seconds", "HV help.", []float64{1}, "a")
	if err := f.Err(); err != nil {
		t.Fatal(err)
	}
	c.Inc()
	cv.WithLabelValues("x", "y").Add(2)
	g.Set(3)
	gv.WithLabelValues("x").Set(4)
	h.Observe(1.5)
	hv.WithLabelValues("x").Observe(0.5)
	want := `
# HELP f_c_total C help.
# TYPE f_c_total counter
f_c_total 1
# HELP f_cv_total CV help.
# TYPE f_cv_total counter
f_cv_total{a="x",b="y"} 2
# HELP f_g G help.
# TYPE f_g gauge
f_g 3
# HELP f_gv GV help.
# TYPE f_gv gauge
f_gv{a="x"} 4
# HELP f_h_seconds H help.
# TYPE f_h_seconds histogram
f_h_seconds_bucket{le="1"} 0
f_h_seconds_bucket{le="2"} 1
f_h_seconds_bucket{le="+Inf"} 1
f_h_seconds_sum 1.5
f_h_seconds_count 1
# HELP f_hv_seconds HV help.
# TYPE f_hv_seconds histogram
f_hv_seconds_bucket{a="x",le="1"} 1
f_hv_seconds_bucket{a="x",le="+Inf"} 1
f_hv_seconds_sum{a="x"} 0.5
f_hv_seconds_count{a="x"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// A Shared factory adopts the equal collectors already registered, so two
// instances update one series; an Exclusive one fails on them.
func TestFactorySharedAndExclusive(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	first := promreg.Shared(reg).CounterVec("s_total", "S.", "k")
	f := promreg.Shared(reg)
	second := f.CounterVec("s_total", "S.", "k")
	if err := f.Err(); err != nil || second != first {
		t.Fatalf("shared: got %p, %v; want the registered collector %p", second, err, first)
	}
	second.WithLabelValues("a").Inc()
	if got := testutil.ToFloat64(first.WithLabelValues("a")); got != 1 {
		t.Fatalf("s_total{k=a} = %v, want 1", got)
	}

	ex := promreg.Exclusive(reg)
	third := ex.CounterVec("s_total", "S.", "k")
	var are prometheus.AlreadyRegisteredError
	if !errors.As(ex.Err(), &are) || third == first {
		t.Fatalf("exclusive: got %p, %v; want a new collector and an AlreadyRegisteredError", third, ex.Err())
	}
}

// After the first error, a factory keeps that error and registers nothing
// more; with a nil Registerer it registers nothing and never fails.
func TestFactoryStopsAtFirstErrorAndNilRegisterer(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f := promreg.Exclusive(reg)
	f.Counter("e_total", "E.")
	f.CounterVec("e_total", "E.", "other") // inconsistent label names
	firstErr := f.Err()
	if firstErr == nil {
		t.Fatal("no error for an inconsistent collector")
	}
	f.Counter("after_total", "After.")
	if f.Err() != firstErr {
		t.Fatalf("error changed to %v, want the first one %v", f.Err(), firstErr)
	}
	if n, err := testutil.GatherAndCount(reg, "after_total"); err != nil || n != 0 {
		t.Fatalf("after_total: %d series (%v), want none registered after the error", n, err)
	}

	for _, nf := range []*promreg.Factory{promreg.Shared(nil), promreg.Exclusive(nil)} {
		c := nf.Counter("n_total", "N.")
		c.Inc()
		if err := nf.Err(); err != nil || testutil.ToFloat64(c) != 1 {
			t.Fatalf("nil registerer: %v, value %v; want no error and a working counter", err, testutil.ToFloat64(c))
		}
	}
}
