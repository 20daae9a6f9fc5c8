package promreg_test

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/promreg"
)

func newCounterVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "X."}, []string{"kind"})
}

// A first registration returns the collector itself; a second one of an
// equal collector returns the first, so both callers update one series.
func TestRegisterSharesEqualCollector(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	first, err := promreg.Register(reg, newCounterVec())
	if err != nil {
		t.Fatal(err)
	}
	second, err := promreg.Register(reg, newCounterVec())
	if err != nil {
		t.Fatalf("second registration: %v", err)
	}
	if second != first {
		t.Fatal("the second registration did not return the registered collector")
	}
	first.WithLabelValues("a").Inc()
	second.WithLabelValues("a").Inc()
	if got := testutil.ToFloat64(first.WithLabelValues("a")); got != 2 {
		t.Fatalf("x_total{kind=a} = %v, want 2", got)
	}
}

// Behind a wrapping registerer (const labels added), the collector
// returned is the caller's own, unwrapped one; other const labels make
// another collector.
func TestRegisterBehindWrappingRegisterer(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	wrapped := func(p string) prometheus.Registerer {
		return prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": p}, reg)
	}
	a1, err := promreg.Register(wrapped("a"), newCounterVec())
	if err != nil {
		t.Fatal(err)
	}
	a2, err := promreg.Register(wrapped("a"), newCounterVec())
	if err != nil || a2 != a1 {
		t.Fatalf("same labels: got %p, %v; want the first collector %p", a2, err, a1)
	}
	b, err := promreg.Register(wrapped("b"), newCounterVec())
	if err != nil || b == a1 {
		t.Fatalf("other labels: got %p, %v; want a new collector", b, err)
	}
	if n := testutil.CollectAndCount(reg); n != 0 {
		// No series until a label value is used.
		t.Fatalf("%d series, want 0", n)
	}
}

// With an interface type parameter, any equal registered collector is
// returned; with a concrete one, an equal collector of another type is the
// AlreadyRegisteredError itself, returned with the caller's collector.
func TestRegisterTypeOfExisting(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "y_total", Help: "Y."}
	registered := prometheus.NewCounter(opts)
	if err := reg.Register(registered); err != nil {
		t.Fatal(err)
	}
	got, err := promreg.Register[prometheus.Collector](reg, prometheus.NewCounter(opts))
	if err != nil || got != prometheus.Collector(registered) {
		t.Fatalf("as a Collector: got %v, %v; want the registered counter", got, err)
	}
	// A GaugeFunc of the same description is not a *prometheus.CounterVec.
	other := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "z_total", Help: "Z."}, func() float64 { return 0 })
	if err := reg.Register(other); err != nil {
		t.Fatal(err)
	}
	mine := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "z_total", Help: "Z."}, nil)
	got2, err := promreg.Register(reg, mine)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) || got2 != mine {
		t.Fatalf("existing collector of another type: got %p, %v; want the caller's collector and an AlreadyRegisteredError", got2, err)
	}
}

// Errors other than AlreadyRegisteredError are returned as they are.
func TestRegisterOtherErrors(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := promreg.Register(reg, newCounterVec()); err != nil {
		t.Fatal(err)
	}
	// Same name, other label names: inconsistent, not already registered.
	clash := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "X."}, []string{"other"})
	got, err := promreg.Register(reg, clash)
	var are prometheus.AlreadyRegisteredError
	if err == nil || errors.As(err, &are) || got != clash {
		t.Fatalf("got %p, %v; want the caller's collector and the registry's error", got, err)
	}
}
