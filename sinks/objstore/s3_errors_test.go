package objstore_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/objstore"
)

const fakeSecret = "FAKE-SECRET-never-in-errors"

// fakeS3 answers the bucket probes of NewS3 and lets put handle object
// requests.
func fakeS3(t *testing.T, put http.HandlerFunc) (*objstore.S3, *atomic.Int32) {
	t.Helper()
	var puts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Has("location"):
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/">us-east-1</LocationConstraint>`))
		case r.Method == http.MethodHead && strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 0:
			w.WriteHeader(http.StatusOK) // BucketExists
		default:
			puts.Add(1)
			put(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	s, err := objstore.NewS3(testkit.Context(t), objstore.S3Config{
		Endpoint: strings.TrimPrefix(srv.URL, "http://"), AccessKey: "fake-access", SecretKey: fakeSecret, Bucket: "bkt",
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, &puts
}

func s3Error(status int, code, msg string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>` + msg + `</Message><Resource>/bkt/k</Resource></Error>`))
	}
}

// Permanent S3 errors come back at once, with the server's reason and
// without the secret; transient ones (503 SlowDown, 500) are retried by the
// client a bounded number of times before the error is returned.
func TestS3ErrorsFromServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, code string
		status     int
		retried    bool
	}{
		{"access-denied", "AccessDenied", http.StatusForbidden, false},
		{"no-such-bucket", "NoSuchBucket", http.StatusNotFound, false},
		{"slow-down", "SlowDown", http.StatusServiceUnavailable, true},
		{"internal", "InternalError", http.StatusInternalServerError, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, puts := fakeS3(t, s3Error(tc.status, tc.code, "refused: "+tc.code))
			t0 := time.Now()
			err := s.Put(testkit.Context(t), "k", []byte("v"), "")
			if err == nil || !strings.Contains(err.Error(), "refused: "+tc.code) {
				t.Fatalf("Put = %v, want the server's message", err)
			}
			if strings.Contains(err.Error(), fakeSecret) {
				t.Errorf("error shows the secret: %v", err)
			}
			if n := puts.Load(); (n > 1) != tc.retried {
				t.Errorf("%d requests, retried = %v, want %v", n, n > 1, tc.retried)
			}
			if d := time.Since(t0); d > 30*time.Second {
				t.Errorf("Put took %v", d)
			}
		})
	}
}

// A Put whose context ends mid-request returns promptly with the context's
// error.
func TestS3PutCancelled(t *testing.T) {
	t.Parallel()
	s, _ := fakeS3(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second): // bounds the server's Close
		}
	})
	ctx, cancel := context.WithTimeout(testkit.Context(t), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := s.Put(ctx, "k", []byte("v"), "")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Put = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("Put returned after %v", d)
	}
}

// Workers starting together on a fresh bucket race to create it; every one
// of them must succeed.
func TestNewS3ConcurrentBucketCreation(t *testing.T) {
	t.Parallel()
	st := testkit.NewObjectStore(t)
	if st.Dir != "" {
		t.Skip("no S3 store")
	}
	ctx := testkit.Context(t)
	cfg := st.S3Config()
	cfg.Bucket = strings.ToLower(strings.NewReplacer("_", "-", "/", "").Replace(testkit.Name(t, "race")))
	if len(cfg.Bucket) > 63 {
		cfg.Bucket = strings.Trim(cfg.Bucket[:63], "-")
	}
	mc := st.MinioClient(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = mc.RemoveBucket(ctx, cfg.Bucket)
	})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := objstore.NewS3(ctx, cfg)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if ok, err := mc.BucketExists(ctx, cfg.Bucket); err != nil || !ok {
		t.Fatalf("bucket %s exists = %v, %v", cfg.Bucket, ok, err)
	}
}
