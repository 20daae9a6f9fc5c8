package localsvc

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// TestMinioDirReused stores an object, restarts MinIO on the same Dir and
// reads it back; Stop frees the port and keeps the caller's Dir.
func TestMinioDirReused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := filepath.Join(t.TempDir(), "minio")
	o := MinioOptions{Dir: dir, AccessKey: "tester", SecretKey: "tester-secret"}
	m, err := StartMinio(ctx, o)
	m = started(t, m, err)
	if m.AccessKey != "tester" || m.SecretKey != "tester-secret" || m.Endpoint != localAddr(m.Port) {
		t.Fatalf("got endpoint %q access %q", m.Endpoint, m.AccessKey)
	}
	c := minioClient(t, m)
	if err := c.MakeBucket(ctx, "bkt", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, "bkt", "k/a.json", bytes.NewReader([]byte(`{"a":1}`)), 7, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertPortFree(t, m.Port)
	if !dirExists(filepath.Join(dir, "data", "bkt")) {
		t.Fatalf("Stop removed the caller's data in %s", dir)
	}

	m2, err := StartMinio(ctx, o)
	m2 = started(t, m2, err)
	obj, err := minioClient(t, m2).GetObject(ctx, "bkt", "k/a.json", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if b, err := io.ReadAll(obj); err != nil || string(b) != `{"a":1}` {
		t.Fatalf("object after restart = %q, %v", b, err)
	}
}

func TestMinioKeys(t *testing.T) {
	t.Parallel()
	if _, err := StartMinio(testContext(t), MinioOptions{SecretKey: "short"}); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("StartMinio with a 5-character SecretKey = %v, want a key error", err)
	}
}

func minioClient(t *testing.T, m *Minio) *minio.Client {
	t.Helper()
	c, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
