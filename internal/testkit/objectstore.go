package testkit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/sluicehq/sluice/internal/localsvc"
)

// DefaultBucket is the bucket used when S3_BUCKET is unset, and the bucket
// of a local MinIO.
const DefaultBucket = "sluice"

// ObjectStore is an S3-compatible bucket, or a local directory, for one
// test. Object keys must start with Prefix; on a shared store (Kind "env")
// objects under Prefix are deleted on cleanup.
type ObjectStore struct {
	// Endpoint is host:port of the S3/MinIO API; empty when Dir is used.
	Endpoint string
	// AccessKey and SecretKey are the credentials. Do not log SecretKey.
	AccessKey, SecretKey string
	// Bucket exists by the time NewObjectStore returns.
	Bucket string
	// Secure is true when Endpoint speaks HTTPS.
	Secure bool
	// Prefix is a unique object key prefix for this test, e.g.
	// "t_testfoo_1a2b3c4d/".
	Prefix string
	// Dir is the local directory store (the FakeOK fallback), a t.TempDir;
	// empty for a real store.
	Dir string
	// Real is false for the local directory.
	Real bool
	// Kind is where the store came from: "env" (S3_ENDPOINT), "local"
	// (minio started for this test) or "dir".
	Kind string
}

// NewObjectStore hands the test an object store. Order: S3_ENDPOINT (host:port,
// or an http:// or https:// URL; S3_SECURE=true also selects HTTPS) with
// S3_ACCESS_KEY, S3_SECRET_KEY and S3_BUCKET (default "sluice"), creating the
// bucket if missing; a minio binary on PATH or in $(go env GOPATH)/bin
// started on a free port in a temporary directory (stopped on cleanup); a
// local directory when FakeOK is given; else the test is skipped (failed
// under CI=true).
func NewObjectStore(t testing.TB, opts ...Option) *ObjectStore {
	t.Helper()
	o := collect(opts)
	s := &ObjectStore{Prefix: Name(t, "t") + "/"}
	var why reasons
	if ep := os.Getenv("S3_ENDPOINT"); ep != "" {
		s.Endpoint = ep
		s.Secure, _ = strconv.ParseBool(os.Getenv("S3_SECURE")) // as the CLI's --s3-secure
		if rest, ok := strings.CutPrefix(ep, "https://"); ok {
			s.Endpoint, s.Secure = rest, true
		} else if rest, ok := strings.CutPrefix(ep, "http://"); ok {
			s.Endpoint, s.Secure = rest, false
		}
		s.Endpoint = strings.TrimSuffix(s.Endpoint, "/")
		s.AccessKey, s.SecretKey = os.Getenv("S3_ACCESS_KEY"), os.Getenv("S3_SECRET_KEY")
		s.Bucket = cmp.Or(os.Getenv("S3_BUCKET"), DefaultBucket)
		s.Real, s.Kind = true, "env"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.ensureBucket(ctx); err != nil {
			t.Fatalf("testkit: %s: %v", s, err)
		}
		t.Cleanup(func() {
			if err := s.deletePrefix(); err != nil {
				t.Logf("testkit: delete objects %s/%s*: %v", s.Bucket, s.Prefix, err)
			}
		})
		return s
	}
	why.add("S3_ENDPOINT unset")
	err := startLocalMinio(t, s)
	if err == nil {
		return s
	}
	why.addLocal(t, "minio", err)
	if !o.fakeOK {
		why.add("fake not allowed")
		unavailable(t, "no object store: %s", why)
		return nil
	}
	*s = ObjectStore{Prefix: s.Prefix, Dir: t.TempDir(), Kind: "dir"}
	return s
}

// IsReal implements Service.
func (s *ObjectStore) IsReal() bool { return s.Real }

// String implements Service; it never includes credentials.
func (s *ObjectStore) String() string {
	if s.Dir != "" {
		return "object store (dir)"
	}
	return fmt.Sprintf("object store (%s) %s bucket %s", s.Kind, s.Endpoint, s.Bucket)
}

// MinioClient returns a minio-go client for the store. It fails the test
// when the store is a local directory.
func (s *ObjectStore) MinioClient(t testing.TB) *minio.Client {
	t.Helper()
	if s.Dir != "" || s.Endpoint == "" {
		t.Fatalf("testkit: %s has no S3 endpoint; use Dir", s)
	}
	c, err := s.client()
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	return c
}

func (s *ObjectStore) client() (*minio.Client, error) {
	c, err := minio.New(s.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Secure: s.Secure,
	})
	if err != nil {
		return nil, fmt.Errorf("minio client for %s: %w", s, err)
	}
	return c, nil
}

// ensureBucket creates the bucket unless it exists; parallel tests may race
// to create it, which is fine.
func (s *ObjectStore) ensureBucket(ctx context.Context) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	bucket := s.Bucket
	ok, err := c.BucketExists(ctx, bucket)
	if err != nil {
		return fmt.Errorf("bucket %s exists: %w", bucket, err)
	}
	if ok {
		return nil
	}
	if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		switch minio.ToErrorResponse(err).Code {
		case "BucketAlreadyOwnedByYou", "BucketAlreadyExists":
			return nil
		}
		return fmt.Errorf("make bucket %s: %w", bucket, err)
	}
	return nil
}

// deletePrefix removes every object under Prefix.
func (s *ObjectStore) deletePrefix() error {
	ctx, cancel := cleanupContext()
	defer cancel()
	c, err := s.client()
	if err != nil {
		return err
	}
	objs := c.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: s.Prefix, Recursive: true})
	var errs []error
	for e := range c.RemoveObjects(ctx, s.Bucket, objs, minio.RemoveObjectsOptions{}) {
		errs = append(errs, fmt.Errorf("%s: %w", e.ObjectName, e.Err))
	}
	return errors.Join(errs...)
}

// startLocalMinio starts MinIO with localsvc (stopped on t's cleanup),
// creates DefaultBucket and fills in s. The error wraps
// localsvc.ErrNotFound when there is no binary.
func startLocalMinio(t testing.TB, s *ObjectStore) error {
	t.Helper()
	m, err := startLocal(t, "minio", func(ctx context.Context) (*localsvc.Minio, error) {
		return localsvc.StartMinio(ctx, localsvc.MinioOptions{
			AccessKey: "testkit",
			SecretKey: fmt.Sprintf("testkit-%016x", rand.Uint64()),
		})
	})
	if err != nil {
		return err
	}
	local := &ObjectStore{
		Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: DefaultBucket,
		Prefix: s.Prefix, Real: true, Kind: "local",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := local.ensureBucket(ctx); err != nil {
		return fmt.Errorf("local minio: %w", err)
	}
	*s = *local
	return nil
}
