package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sinks/objstore"
)

// S3Config returns the objstore connection config of the store (endpoint,
// credentials, bucket, TLS); it is the zero value for a directory store.
// Keys written through it must still start with Prefix.
func (s *ObjectStore) S3Config() objstore.S3Config {
	if s.Dir != "" {
		return objstore.S3Config{}
	}
	return objstore.S3Config{Endpoint: s.Endpoint, AccessKey: s.AccessKey, SecretKey: s.SecretKey, Bucket: s.Bucket, Secure: s.Secure}
}

// Store opens the store as an objstore.Store: an objstore.Dir on Dir, or an
// objstore.S3 on the bucket with every key put under Prefix. The test fails
// if it cannot be opened.
func (s *ObjectStore) Store(t testing.TB) objstore.Store {
	t.Helper()
	if s.Dir != "" {
		d, err := objstore.NewDir(s.Dir)
		if err != nil {
			t.Fatalf("testkit: open directory store: %v", err)
		}
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s3, err := objstore.NewS3(ctx, s.S3Config())
	if err != nil {
		t.Fatalf("testkit: open %s: %v", s, err)
	}
	return objstore.WithPrefix(s3, s.Prefix)
}
