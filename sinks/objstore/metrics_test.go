package objstore_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/objstore"
)

// instrumentedDir returns a directory store in t.TempDir() instrumented for
// pipeline "p" on a fresh registry.
func instrumentedDir(t *testing.T) (objstore.Store, *prometheus.Registry) {
	t.Helper()
	d, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s, err := objstore.Instrument(d, reg, "p")
	if err != nil {
		t.Fatal(err)
	}
	return s, reg
}

// Each call counts once under its op and result (a missing key is
// not_found, a refused key permanent_error, a file-system failure
// transient_error, a cancelled call canceled), is timed once, and the data
// of successful Puts and Gets is counted in bytes.
func TestInstrumentDirCountsEveryCall(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	// The steps run in order on one store.
	steps := []struct {
		name         string
		call         func(ctx context.Context, s objstore.Store) error
		op, result   string
		wrote, reads float64 // bytes added to the counters
	}{
		{"put", func(ctx context.Context, s objstore.Store) error { return s.Put(ctx, "a/x", []byte("hello"), "") }, "put", "ok", 5, 0},
		{"put-utf8", func(ctx context.Context, s objstore.Store) error { return s.Put(ctx, "a/y", []byte("wörld!"), "") }, "put", "ok", 7, 0},
		{"put-empty", func(ctx context.Context, s objstore.Store) error { return s.Put(ctx, "a/empty", nil, "") }, "put", "ok", 0, 0},
		{"get", func(ctx context.Context, s objstore.Store) error {
			b, err := s.Get(ctx, "a/y")
			if err == nil && string(b) != "wörld!" {
				t.Errorf("Get a/y = %q", b)
			}
			return err
		}, "get", "ok", 0, 7},
		{"get-missing", func(ctx context.Context, s objstore.Store) error {
			_, err := s.Get(ctx, "a/missing")
			return wantIs(t, err, objstore.ErrNotFound)
		}, "get", "not_found", 0, 0},
		{"stat", func(ctx context.Context, s objstore.Store) error { _, err := s.Stat(ctx, "a/x"); return err }, "stat", "ok", 0, 0},
		{"stat-prefix-only", func(ctx context.Context, s objstore.Store) error {
			_, err := s.Stat(ctx, "a")
			return wantIs(t, err, objstore.ErrNotFound)
		}, "stat", "not_found", 0, 0},
		{"list", func(ctx context.Context, s objstore.Store) error {
			infos, err := s.List(ctx, "a/")
			if err == nil && len(infos) != 3 {
				t.Errorf("List a/ = %+v, want 3 objects", infos)
			}
			return err
		}, "list", "ok", 0, 0},
		{"list-empty", func(ctx context.Context, s objstore.Store) error { _, err := s.List(ctx, "none/"); return err }, "list", "ok", 0, 0},
		{"delete", func(ctx context.Context, s objstore.Store) error { return s.Delete(ctx, "a/x") }, "delete", "ok", 0, 0},
		{"delete-missing", func(ctx context.Context, s objstore.Store) error { return s.Delete(ctx, "a/x") }, "delete", "ok", 0, 0},
		{"put-invalid-key", func(ctx context.Context, s objstore.Store) error {
			return wantIs(t, s.Put(ctx, "a/../b", []byte("data"), ""), objstore.ErrInvalidKey)
		}, "put", "permanent_error", 0, 0},
		{"get-invalid-key", func(ctx context.Context, s objstore.Store) error {
			_, err := s.Get(ctx, "/abs")
			return wantIs(t, err, objstore.ErrInvalidKey)
		}, "get", "permanent_error", 0, 0},
		{"put-under-an-object", func(ctx context.Context, s objstore.Store) error {
			// "a/y" is a file: its "directory" cannot be created.
			err := s.Put(ctx, "a/y/z", []byte("data"), "")
			if err == nil || errors.Is(err, objstore.ErrNotFound) || objstore.IsPermanent(err) {
				t.Errorf("Put a/y/z = %v, want a transient error", err)
			}
			return err
		}, "put", "transient_error", 0, 0},
		{"put-cancelled", func(_ context.Context, s objstore.Store) error {
			return wantIs(t, s.Put(cancelled, "a/c", []byte("data"), ""), context.Canceled)
		}, "put", "canceled", 0, 0},
		{"get-cancelled", func(_ context.Context, s objstore.Store) error {
			_, err := s.Get(cancelled, "a/y")
			return wantIs(t, err, context.Canceled)
		}, "get", "canceled", 0, 0},
	}
	s, reg := instrumentedDir(t)
	ctx := testkit.Context(t)
	for _, st := range steps {
		ops := testkit.Metric(t, reg, "sluice_objstore_operations_total")
		this := testkit.Metric(t, reg, "sluice_objstore_operations_total", "op", st.op, "result", st.result)
		timed := testkit.Metric(t, reg, "sluice_objstore_operation_duration_seconds", "op", st.op)
		wrote := testkit.Metric(t, reg, "sluice_objstore_written_bytes_total")
		read := testkit.Metric(t, reg, "sluice_objstore_read_bytes_total")
		_ = st.call(ctx, s)
		if got := testkit.Metric(t, reg, "sluice_objstore_operations_total", "op", st.op, "result", st.result) - this; got != 1 {
			t.Errorf("%s: operations_total{op=%s,result=%s} grew by %v, want 1", st.name, st.op, st.result, got)
		}
		if got := testkit.Metric(t, reg, "sluice_objstore_operations_total") - ops; got != 1 {
			t.Errorf("%s: operations_total grew by %v in all, want 1", st.name, got)
		}
		if got := testkit.Metric(t, reg, "sluice_objstore_operation_duration_seconds", "op", st.op) - timed; got != 1 {
			t.Errorf("%s: duration{op=%s} got %v samples, want 1", st.name, st.op, got)
		}
		if got := testkit.Metric(t, reg, "sluice_objstore_written_bytes_total") - wrote; got != st.wrote {
			t.Errorf("%s: written bytes grew by %v, want %v", st.name, got, st.wrote)
		}
		if got := testkit.Metric(t, reg, "sluice_objstore_read_bytes_total") - read; got != st.reads {
			t.Errorf("%s: read bytes grew by %v, want %v", st.name, got, st.reads)
		}
	}

	// The whole exposition: every series carries pipeline and backend, and
	// the results an op can have are exposed even at 0.
	const want = `
# HELP sluice_objstore_operations_total Object-store calls, per op (put, get, stat, list, delete) and result (ok, not_found, canceled, permanent_error, transient_error).
# TYPE sluice_objstore_operations_total counter
sluice_objstore_operations_total{backend="dir",op="delete",pipeline="p",result="canceled"} 0
sluice_objstore_operations_total{backend="dir",op="delete",pipeline="p",result="ok"} 2
sluice_objstore_operations_total{backend="dir",op="delete",pipeline="p",result="permanent_error"} 0
sluice_objstore_operations_total{backend="dir",op="delete",pipeline="p",result="transient_error"} 0
sluice_objstore_operations_total{backend="dir",op="get",pipeline="p",result="canceled"} 1
sluice_objstore_operations_total{backend="dir",op="get",pipeline="p",result="not_found"} 1
sluice_objstore_operations_total{backend="dir",op="get",pipeline="p",result="ok"} 1
sluice_objstore_operations_total{backend="dir",op="get",pipeline="p",result="permanent_error"} 1
sluice_objstore_operations_total{backend="dir",op="get",pipeline="p",result="transient_error"} 0
sluice_objstore_operations_total{backend="dir",op="list",pipeline="p",result="canceled"} 0
sluice_objstore_operations_total{backend="dir",op="list",pipeline="p",result="ok"} 2
sluice_objstore_operations_total{backend="dir",op="list",pipeline="p",result="permanent_error"} 0
sluice_objstore_operations_total{backend="dir",op="list",pipeline="p",result="transient_error"} 0
sluice_objstore_operations_total{backend="dir",op="put",pipeline="p",result="canceled"} 1
sluice_objstore_operations_total{backend="dir",op="put",pipeline="p",result="ok"} 3
sluice_objstore_operations_total{backend="dir",op="put",pipeline="p",result="permanent_error"} 1
sluice_objstore_operations_total{backend="dir",op="put",pipeline="p",result="transient_error"} 1
sluice_objstore_operations_total{backend="dir",op="stat",pipeline="p",result="canceled"} 0
sluice_objstore_operations_total{backend="dir",op="stat",pipeline="p",result="not_found"} 1
sluice_objstore_operations_total{backend="dir",op="stat",pipeline="p",result="ok"} 1
sluice_objstore_operations_total{backend="dir",op="stat",pipeline="p",result="permanent_error"} 0
sluice_objstore_operations_total{backend="dir",op="stat",pipeline="p",result="transient_error"} 0
# HELP sluice_objstore_read_bytes_total Object bytes returned by successful Gets.
# TYPE sluice_objstore_read_bytes_total counter
sluice_objstore_read_bytes_total{backend="dir",pipeline="p"} 7
# HELP sluice_objstore_written_bytes_total Object bytes stored by successful Puts.
# TYPE sluice_objstore_written_bytes_total counter
sluice_objstore_written_bytes_total{backend="dir",pipeline="p"} 12
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"sluice_objstore_operations_total", "sluice_objstore_read_bytes_total", "sluice_objstore_written_bytes_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "sluice_objstore_operation_duration_seconds"); n != 5 {
		t.Errorf("%d duration series, want one per op (5)", n)
	}
	if n := testkit.Metric(t, reg, "sluice_objstore_operation_duration_seconds"); n != float64(len(steps)) {
		t.Errorf("duration histograms hold %v samples, want %d (one per call)", n, len(steps))
	}
}

// wantIs reports err when it does not match target, and returns err.
func wantIs(t *testing.T, err, target error) error {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("error %v, want one matching %v", err, target)
	}
	return err
}

// S3 answers are classified too: AccessDenied is permanent, NoSuchKey is
// not_found; the backend label says s3, through a Prefixed as well.
func TestInstrumentS3Errors(t *testing.T) {
	t.Parallel()
	s3, _ := fakeS3(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			s3Error(http.StatusForbidden, "AccessDenied", "Access Denied")(w, r)
			return
		}
		s3Error(http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")(w, r)
	})
	reg := prometheus.NewRegistry()
	s, err := objstore.Instrument(objstore.WithPrefix(s3, "t/"), reg, "p")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	if err := s.Put(ctx, "k", []byte("data"), ""); !objstore.IsPermanent(err) {
		t.Fatalf("Put = %v, want a permanent error", err)
	}
	if _, err := s.Stat(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat = %v, want ErrNotFound", err)
	}
	for _, c := range []struct {
		op, result string
		want       float64
	}{
		{"put", "permanent_error", 1},
		{"put", "transient_error", 0},
		{"stat", "not_found", 1},
		{"stat", "transient_error", 0},
	} {
		if got := testkit.Metric(t, reg, "sluice_objstore_operations_total", "backend", "s3", "pipeline", "p", "op", c.op, "result", c.result); got != c.want {
			t.Errorf("operations_total{backend=s3,op=%s,result=%s} = %v, want %v", c.op, c.result, got, c.want)
		}
	}
	if got := testkit.Metric(t, reg, "sluice_objstore_written_bytes_total"); got != 0 {
		t.Errorf("written bytes %v after a failed Put, want 0", got)
	}
}

// Stores of two pipelines share a registry with their own series; a second
// instrumentation with the same labels shares the first one's series
// instead of failing; re-instrumenting an instrumented store counts each
// call once; a nil registerer leaves the store as it is.
func TestInstrumentRegistration(t *testing.T) {
	t.Parallel()
	d, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a1, err := objstore.Instrument(d, reg, "a")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := objstore.Instrument(objstore.WithPrefix(d, "x/"), reg, "a")
	if err != nil {
		t.Fatalf("second Instrument with the same labels: %v", err)
	}
	b, err := objstore.Instrument(a1, reg, "b")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	for _, s := range []objstore.Store{a1, a2, b} {
		if err := s.Put(ctx, "k", []byte("abc"), ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		pipeline string
		puts     float64
	}{{"a", 2}, {"b", 1}} {
		if got := testkit.Metric(t, reg, "sluice_objstore_operations_total", "pipeline", c.pipeline, "backend", "dir", "op", "put", "result", "ok"); got != c.puts {
			t.Errorf("pipeline %s: %v puts counted, want %v", c.pipeline, got, c.puts)
		}
		if got := testkit.Metric(t, reg, "sluice_objstore_written_bytes_total", "pipeline", c.pipeline); got != 3*c.puts {
			t.Errorf("pipeline %s: %v bytes written, want %v", c.pipeline, got, 3*c.puts)
		}
	}
	if s, err := objstore.Instrument(d, nil, "a"); err != nil || s != objstore.Store(d) {
		t.Errorf("Instrument with a nil registerer = %v, %v; want the store itself", s, err)
	}
	if _, err := objstore.Instrument(nil, reg, "a"); err == nil {
		t.Error("Instrument(nil store) succeeded")
	}
}
