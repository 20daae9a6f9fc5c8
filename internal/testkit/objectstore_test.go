package testkit

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// checkObjects puts an object under the store's prefix, reads it back and,
// on a shared store, checks that it is deleted when the test ends.
func checkObjects(t *testing.T, opts ...Option) *ObjectStore {
	t.Helper()
	var s *ObjectStore
	t.Run("put-get", func(t *testing.T) {
		s = NewObjectStore(t, opts...)
		t.Logf("using %s", s)
		putGet(t, s)
	})
	if t.Failed() || s == nil || s.Kind != "env" {
		return s
	}
	c, err := s.client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for o := range c.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: s.Prefix, Recursive: true}) {
		t.Fatalf("object %s (err %v) survived its test on the shared store", o.Key, o.Err)
	}
	return s
}

// putGet writes an object under s.Prefix and, on an S3 store, reads it back.
func putGet(t *testing.T, s *ObjectStore) {
	t.Helper()
	if !strings.HasSuffix(s.Prefix, "/") || !nameRE.MatchString(strings.TrimSuffix(s.Prefix, "/")) {
		t.Fatalf("Prefix %q", s.Prefix)
	}
	if s.Dir != "" {
		if s.Real || s.Endpoint != "" {
			t.Fatalf("dir store %s: Real=%v Endpoint=%q", s, s.Real, s.Endpoint)
		}
		p := filepath.Join(s.Dir, s.Prefix, "a.json")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(`{}`), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	ctx := Context(t)
	c := s.MinioClient(t)
	key := s.Prefix + "dir/a.json"
	if _, err := c.PutObject(ctx, s.Bucket, key, bytes.NewReader([]byte(`{"a":1}`)), 7, minio.PutObjectOptions{}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	obj, err := c.GetObject(ctx, s.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if b, err := io.ReadAll(obj); err != nil || string(b) != `{"a":1}` {
		t.Fatalf("get %s = %q, %v", key, b, err)
	}
}

func TestObjectStore(t *testing.T) {
	t.Parallel()
	checkObjects(t, FakeOK())
}

func TestObjectStoreDir(t *testing.T) {
	t.Setenv("S3_ENDPOINT", "")
	t.Setenv("PATH", t.TempDir())
	t.Setenv("GOPATH", t.TempDir())
	s := checkObjects(t, FakeOK())
	if s == nil || s.Kind != "dir" || s.Dir == "" {
		t.Fatalf("got %v, want a local directory store", s)
	}
}

func TestObjectStoreLocalMinio(t *testing.T) {
	t.Setenv("S3_ENDPOINT", "")
	t.Setenv("CI", "") // a missing minio binary skips this test, also in CI
	var s *ObjectStore
	r := record(t, func(tb testing.TB) { s = NewObjectStore(tb) })
	switch {
	case r.skipped && strings.Contains(r.msg, "minio not found"):
		t.Skipf("no minio binary to test the local path: %s", r.msg)
	case r.skipped || r.failed:
		t.Fatalf("NewObjectStore without S3_ENDPOINT: %s", r.msg)
	case s.Kind != "local" || !s.Real || s.Endpoint == "" || s.Dir != "" || s.Bucket != DefaultBucket:
		t.Fatalf("got %v, want a local minio with bucket %s", s, DefaultBucket)
	}
	putGet(t, s)
}
