package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config locates an S3-compatible bucket.
type S3Config struct {
	// Endpoint is host:port of the S3 API (no scheme).
	Endpoint string
	// AccessKey and SecretKey are the credentials; they are never logged.
	AccessKey, SecretKey string
	// Bucket is created by NewS3 when it does not exist.
	Bucket string
	// Secure selects HTTPS.
	Secure bool
}

// S3 is a Store on an S3-compatible bucket (MinIO, AWS S3) through
// minio-go. A PUT is atomic by nature: readers see the old or the whole new
// object. S3 is safe for concurrent use.
type S3 struct {
	c      *minio.Client
	bucket string
}

var _ Store = (*S3)(nil)

// NewS3 connects to the bucket, creating it if it does not exist.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, errors.New("objstore: S3 endpoint and bucket are required")
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: cfg.Secure,
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: S3 client for %s: %w", cfg.Endpoint, err)
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("objstore: bucket %s on %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	if !ok {
		if err := c.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{}); err != nil {
			switch minio.ToErrorResponse(err).Code {
			case "BucketAlreadyOwnedByYou", "BucketAlreadyExists":
			default:
				return nil, fmt.Errorf("objstore: create bucket %s: %w", cfg.Bucket, err)
			}
		}
	}
	return &S3{c: c, bucket: cfg.Bucket}, nil
}

// mapErr wraps the error of operation op on key: a missing key matches
// ErrNotFound, and a key the server refuses (KeyTooLongError,
// InvalidObjectName, XMinioInvalidObjectName) matches ErrInvalidKey as
// well as carrying the server's answer (S3Code), so that callers treat it
// as a problem of that key, not of the store's configuration.
func (s *S3) mapErr(op, key string, err error) error {
	switch minio.ToErrorResponse(err).Code {
	case "NoSuchKey", "NoSuchObject":
		return fmt.Errorf("objstore: %s %s: %w", op, key, ErrNotFound)
	case "KeyTooLongError", "InvalidObjectName", "XMinioInvalidObjectName":
		return fmt.Errorf("objstore: %s %s: %w: %w", op, key, ErrInvalidKey, err)
	}
	return fmt.Errorf("objstore: %s %s: %w", op, key, err)
}

// Put uploads data under key.
func (s *S3) Put(ctx context.Context, key string, data []byte, contentType string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	_, err := s.c.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{ContentType: contentType})
	if err != nil {
		return s.mapErr("put", key, err)
	}
	return nil
}

// Get downloads the object or returns an error matching ErrNotFound.
func (s *S3) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ValidKey(key); err != nil {
		return nil, err
	}
	obj, err := s.c.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.mapErr("get", key, err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		return nil, s.mapErr("get", key, err)
	}
	return b, nil
}

// Stat describes the object or returns an error matching ErrNotFound.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidKey(key); err != nil {
		return Info{}, err
	}
	oi, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s.mapErr("stat", key, err)
	}
	return Info{Key: oi.Key, Size: oi.Size, Modified: oi.LastModified}, nil
}

// List returns the objects whose key starts with prefix, sorted by key.
func (s *S3) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	var out []Info
	for oi := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if oi.Err != nil {
			return nil, fmt.Errorf("objstore: list %q: %w", prefix, oi.Err)
		}
		out = append(out, Info{Key: oi.Key, Size: oi.Size, Modified: oi.LastModified})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete removes the object; deleting a missing key is not an error.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		if err := s.mapErr("delete", key, err); !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return nil
}
