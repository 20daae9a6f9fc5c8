package testkit

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Buffer is a bytes.Buffer whose Write and String are safe for concurrent
// use: the output of a logger or a command running in the background, read
// by the test while it is written.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// StopTimeout bounds how long the stop function of RunInBackground waits
// for the background run to return after cancelling it.
const StopTimeout = 60 * time.Second

// WaitFor polls cond until it reports true and fails the test with
// "timed out after <timeout> waiting for <what>" when timeout passes first.
// cond is called on the calling goroutine (so it may call t.Fatal), first
// at once, then every 10 ms backing off to every 50 ms.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	const first, most = 10 * time.Millisecond, 50 * time.Millisecond
	deadline := time.Now().Add(timeout)
	interval := first
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval)
		interval = min(2*interval, most)
	}
}

// RunInBackground calls run in a new goroutine with a context that stop
// cancels. If run returns before stop was called, the test fails with
// "<name> stopped on its own: <error>".
//
// stop cancels the context and waits up to StopTimeout for run to return;
// it returns run's error, or an error saying run did not stop in time. It
// is safe to call more than once and from several goroutines: later calls
// return the first call's result. If the test has not called stop when it
// ends, a cleanup registered by RunInBackground calls it and fails the test
// with a non-nil result (unless run had already failed it by stopping on its
// own).
func RunInBackground(t testing.TB, name string, run func(ctx context.Context) error) (stop func() error) {
	t.Helper()
	return runInBackground(t, name, StopTimeout, run)
}

func runInBackground(t testing.TB, name string, bound time.Duration, run func(ctx context.Context) error) func() error {
	ctx, cancel := context.WithCancel(context.Background())
	var stopping, early, called atomic.Bool
	errc := make(chan error, 1)
	go func() {
		err := run(ctx)
		if !stopping.Load() {
			early.Store(true)
			t.Errorf("%s stopped on its own: %v", name, err)
		}
		errc <- err
	}()
	var once sync.Once
	var result error
	stop := func() error {
		once.Do(func() {
			stopping.Store(true)
			cancel()
			select {
			case result = <-errc:
			case <-time.After(bound):
				result = fmt.Errorf("%s did not stop within %s", name, bound)
			}
		})
		return result
	}
	t.Cleanup(func() {
		if called.Load() {
			return
		}
		if err := stop(); err != nil && !early.Load() {
			t.Errorf("stopping %s: %v", name, err)
		}
	})
	return func() error {
		called.Store(true)
		return stop()
	}
}

// Metric gathers g and sums the samples of the metric family name whose
// labels include every name/value pair in labels (given as name1, value1,
// name2, value2, ...; none sums every sample). A counter, gauge or untyped
// sample adds its value, a histogram or summary its sample count. A family
// or label that does not exist contributes 0. An odd number of labels fails
// the test.
func Metric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("testkit: Metric(%s): labels %q are not name/value pairs", name, labels)
	}
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("testkit: gather metrics: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
						break
					}
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Untyped != nil:
				sum += m.GetUntyped().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			case m.Summary != nil:
				sum += float64(m.GetSummary().GetSampleCount())
			}
		}
	}
	return sum
}
