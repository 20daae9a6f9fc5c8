package testkit

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/sluicehq/sluice/sinks/objstore"
)

// Store writes where the ObjectStore says: in Dir, or in the bucket under
// Prefix.
func TestObjectStoreStore(t *testing.T) {
	t.Parallel()
	checkStore(t, NewObjectStore(t, FakeOK()))
}

func TestObjectStoreStoreDir(t *testing.T) {
	t.Setenv("S3_ENDPOINT", "")
	t.Setenv("PATH", t.TempDir())
	t.Setenv("GOPATH", t.TempDir())
	s := NewObjectStore(t, FakeOK())
	if s.Dir == "" {
		t.Fatalf("got %s, want a local directory store", s)
	}
	checkStore(t, s)
}

func checkStore(t *testing.T, s *ObjectStore) {
	t.Helper()
	t.Logf("using %s", s)
	st := s.Store(t)
	ctx := Context(t)
	if err := st.Put(ctx, "x/a.json", []byte(`{"a":1}`), "application/json"); err != nil {
		t.Fatal(err)
	}
	if b, err := st.Get(ctx, "x/a.json"); err != nil || string(b) != `{"a":1}` {
		t.Fatalf("Get = %q, %v", b, err)
	}
	var raw []byte
	var err error
	if s.Dir != "" {
		if (s.S3Config() != objstore.S3Config{}) {
			t.Errorf("S3Config of a directory store = %+v, want the zero value", s.S3Config())
		}
		raw, err = os.ReadFile(filepath.Join(s.Dir, "x", "a.json"))
	} else {
		if c := s.S3Config(); c.Endpoint != s.Endpoint || c.Bucket != s.Bucket || c.AccessKey != s.AccessKey || c.SecretKey != s.SecretKey || c.Secure != s.Secure {
			t.Errorf("S3Config does not match the store %s", s)
		}
		var obj *minio.Object
		obj, err = s.MinioClient(t).GetObject(ctx, s.Bucket, s.Prefix+"x/a.json", minio.GetObjectOptions{})
		if err == nil {
			defer obj.Close()
			raw, err = io.ReadAll(obj)
		}
	}
	if err != nil || string(raw) != `{"a":1}` {
		t.Fatalf("object as stored: %q, %v; want it in Dir, or under Prefix in the bucket", raw, err)
	}
}
