package objstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// Values of the op label of the sluice_objstore_* metrics: one per Store
// method.
const (
	opPut    = "put"
	opGet    = "get"
	opStat   = "stat"
	opList   = "list"
	opDelete = "delete"
)

// Values of the result label of sluice_objstore_operations_total.
const (
	resultOK             = "ok"
	resultNotFound       = "not_found"
	resultCanceled       = "canceled"
	resultPermanentError = "permanent_error"
	resultTransientError = "transient_error"
)

// result classifies the error a Store method returned into a value of the
// result label:
//
//   - ok for nil (Delete of a missing key and an empty List included);
//   - not_found for an error matching ErrNotFound (Get or Stat of a missing
//     key): an answer, not a failure of the store;
//   - canceled for an error matching context.Canceled (the caller gave up,
//     e.g. on shutdown or a partition revoke);
//   - permanent_error when IsPermanent(err): a key no store can hold, wrong
//     credentials, a missing bucket;
//   - transient_error for every other error (I/O and network errors, 5xx
//     and throttling answers, context.DeadlineExceeded).
func result(err error) string {
	switch {
	case err == nil:
		return resultOK
	case errors.Is(err, ErrNotFound):
		return resultNotFound
	case errors.Is(err, context.Canceled):
		return resultCanceled
	case IsPermanent(err):
		return resultPermanentError
	default:
		return resultTransientError
	}
}

// metrics of the stores instrumented for one pipeline. Every series carries
// the const labels pipeline and backend (added by the wrapping registerer),
// so the stores of several pipelines can share one registry.
type metrics struct {
	ops      *prometheus.CounterVec   // op, result
	duration *prometheus.HistogramVec // op
	written  prometheus.Counter
	read     prometheus.Counter
}

// newMetrics registers the collectors on reg, or adopts the equal ones
// already registered (promreg.Shared: two stores instrumented for the
// same pipeline and backend share their series); its error is the
// registry's.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f := promreg.Shared(reg)
	m := &metrics{
		ops: f.CounterVec("sluice_objstore_operations_total",
			"Object-store calls, per op (put, get, stat, list, delete) and result (ok, not_found, canceled, permanent_error, transient_error).",
			"op", "result"),
		duration: f.HistogramVec("sluice_objstore_operation_duration_seconds", "Latency of object-store calls, whatever their result, per op.",
			prometheus.ExponentialBuckets(0.0001, 2, 17), "op"), // 100µs … ~6.5s
		written: f.Counter("sluice_objstore_written_bytes_total", "Object bytes stored by successful Puts."),
		read:    f.Counter("sluice_objstore_read_bytes_total", "Object bytes returned by successful Gets."),
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	// Create the series of every result an op can have, so that they are
	// exposed at 0 and the first failure shows in rate() and increase().
	for _, op := range []string{opPut, opGet, opStat, opList, opDelete} {
		for _, res := range []string{resultOK, resultCanceled, resultPermanentError, resultTransientError} {
			m.ops.WithLabelValues(op, res)
		}
	}
	m.ops.WithLabelValues(opGet, resultNotFound)
	m.ops.WithLabelValues(opStat, resultNotFound)
	return m, nil
}

// Instrument returns a Store that calls s and records the
// sluice_objstore_* metrics on reg, with the const labels pipeline and
// backend ("dir" for a *Dir, "s3" for an *S3, the inner store's backend for
// a *Prefixed, "other" for any other Store):
//
//   - sluice_objstore_operations_total{op,result}: one per call; op is put,
//     get, stat, list or delete; result is ok, not_found (Get or Stat of a
//     missing key: an answer, not an error), canceled (the error matches
//     context.Canceled), permanent_error (IsPermanent) or transient_error
//     (any other error, context.DeadlineExceeded included);
//   - sluice_objstore_operation_duration_seconds{op}: the latency of every
//     call;
//   - sluice_objstore_written_bytes_total, sluice_objstore_read_bytes_total:
//     the data of successful Puts and Gets.
//
// Several stores may be instrumented on one registry: stores with
// different pipeline labels get their own series, and instrumenting again
// with the same pipeline and backend (another service of the same pipeline,
// a second constructor call) shares the series instead of failing.
// Instrumenting a store Instrument returned instruments the store it wraps
// (each call is counted once, under the new labels). With a nil reg,
// Instrument returns s unchanged. The returned Store keeps s's contract and
// returns its errors unchanged.
func Instrument(s Store, reg prometheus.Registerer, pipeline string) (Store, error) {
	if s == nil {
		return nil, errors.New("objstore: instrument: nil store")
	}
	if reg == nil {
		return s, nil
	}
	if in, ok := s.(*instrumented); ok {
		s = in.inner
	}
	m, err := newMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": pipeline, "backend": backend(s)}, reg))
	if err != nil {
		return nil, fmt.Errorf("objstore: register metrics: %w", err)
	}
	return &instrumented{inner: s, m: m}, nil
}

// backend names the kind of s for the backend label.
func backend(s Store) string {
	switch v := s.(type) {
	case *Dir:
		return "dir"
	case *S3:
		return "s3"
	case *Prefixed:
		return backend(v.inner)
	case *instrumented:
		return backend(v.inner)
	}
	return "other"
}

// instrumented is the Store Instrument returns.
type instrumented struct {
	inner Store
	m     *metrics
}

var _ Store = (*instrumented)(nil)

// observe records one call of op that started at start and returned err.
func (s *instrumented) observe(op string, start time.Time, err error) {
	s.m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	s.m.ops.WithLabelValues(op, result(err)).Inc()
}

// Put implements Store.
func (s *instrumented) Put(ctx context.Context, key string, data []byte, contentType string) error {
	start := time.Now()
	err := s.inner.Put(ctx, key, data, contentType)
	s.observe(opPut, start, err)
	if err == nil {
		s.m.written.Add(float64(len(data)))
	}
	return err
}

// Get implements Store.
func (s *instrumented) Get(ctx context.Context, key string) ([]byte, error) {
	start := time.Now()
	b, err := s.inner.Get(ctx, key)
	s.observe(opGet, start, err)
	if err == nil {
		s.m.read.Add(float64(len(b)))
	}
	return b, err
}

// Stat implements Store.
func (s *instrumented) Stat(ctx context.Context, key string) (Info, error) {
	start := time.Now()
	in, err := s.inner.Stat(ctx, key)
	s.observe(opStat, start, err)
	return in, err
}

// List implements Store.
func (s *instrumented) List(ctx context.Context, prefix string) ([]Info, error) {
	start := time.Now()
	infos, err := s.inner.List(ctx, prefix)
	s.observe(opList, start, err)
	return infos, err
}

// Delete implements Store.
func (s *instrumented) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := s.inner.Delete(ctx, key)
	s.observe(opDelete, start, err)
	return err
}
