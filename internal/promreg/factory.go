package promreg

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Factory makes collectors and registers each one on a Registerer as it
// makes it, so that a metric is declared in one line: its name, help text,
// label names and (for histograms) buckets, exactly as given. The first
// registration error is kept (Err) and no collector is registered after
// it; the collectors are still made and returned. A Factory is not safe
// for concurrent use; it is meant to be used once, in a metrics
// constructor.
type Factory struct {
	reg    prometheus.Registerer
	shared bool
	err    error
}

// Shared returns a Factory that registers with Register: a collector equal
// to one already registered on reg is replaced by the registered one, so
// that several instances of a component share their series. With a nil
// reg, the collectors are made and registered nowhere.
func Shared(reg prometheus.Registerer) *Factory {
	return &Factory{reg: reg, shared: true}
}

// Exclusive returns a Factory that registers with reg.Register: a
// collector equal to one already registered is an error (an
// AlreadyRegisteredError). With a nil reg, the collectors are made and
// registered nowhere.
func Exclusive(reg prometheus.Registerer) *Factory {
	return &Factory{reg: reg}
}

// Err returns the first registration error, as the Registerer returned it
// (the caller adds its context), or nil.
func (f *Factory) Err() error {
	return f.err
}

// Counter makes and registers a counter.
func (f *Factory) Counter(name, help string) prometheus.Counter {
	return add[prometheus.Counter](f, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

// CounterVec makes and registers a counter vector with the label names
// labels.
func (f *Factory) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return add(f, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

// Gauge makes and registers a gauge.
func (f *Factory) Gauge(name, help string) prometheus.Gauge {
	return add[prometheus.Gauge](f, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

// GaugeVec makes and registers a gauge vector with the label names labels.
func (f *Factory) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return add(f, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

// Histogram makes and registers a histogram with the bucket upper bounds
// buckets (nil: prometheus.DefBuckets).
func (f *Factory) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return add[prometheus.Histogram](f, prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}))
}

// HistogramVec makes and registers a histogram vector with the bucket
// upper bounds buckets (nil: prometheus.DefBuckets) and the label names
// labels.
func (f *Factory) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return add(f, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
}

// add registers c as f registers (unless f has no Registerer or already
// failed) and returns the collector to use: c, or the registered equal
// collector a Shared factory adopts.
func add[C prometheus.Collector](f *Factory, c C) C {
	if f.reg == nil || f.err != nil {
		return c
	}
	if f.shared {
		c, f.err = Register(f.reg, c)
		return c
	}
	f.err = f.reg.Register(c)
	return c
}
