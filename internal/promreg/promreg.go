// Package promreg registers Prometheus collectors on an injected
// prometheus.Registerer so that several instances of one component (two
// sinks of one table, two stores of one pipeline, the workers of one
// process) can share a registry and its series instead of failing on the
// second registration.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it, or, when reg already holds an
// equal collector (reg.Register returns a prometheus.AlreadyRegisteredError:
// same metric names, help, label names and const label values) that is a C,
// returns that registered collector with a nil error, so that the caller
// updates the series already exported. Any other error of reg.Register,
// an AlreadyRegisteredError whose existing collector is not a C included,
// is returned as it is (the caller adds its context), with c. reg must not
// be nil.
//
// With C an interface such as prometheus.Collector, any existing collector
// is a C; with a concrete type such as *prometheus.CounterVec, an equal
// collector of another type is an error rather than a panic later.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
