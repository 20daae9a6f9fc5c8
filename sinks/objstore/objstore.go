// Package objstore is sluice's object store: S3/MinIO through minio-go, or a
// local directory when no S3 endpoint is configured. Both implementations
// give the same contract:
//
//   - Put is atomic: a reader sees either the previous object or the whole
//     new one, never a partial write (the directory store writes a .tmp file,
//     fsyncs it and renames it; S3 PUTs are atomic by nature).
//   - Keys are slash-separated paths such as "ticks/FPT/2024-05-02/part_1_x.parquet".
//   - Get and Stat of a missing key return an error matching ErrNotFound.
//   - Implementations are safe for concurrent use.
package objstore

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is matched (errors.Is) by the error for a missing key.
var ErrNotFound = errors.New("object not found")

// ErrInvalidKey is matched (errors.Is) by the error for a key or prefix that
// ValidKey refuses. It is permanent: retrying the same key cannot succeed.
var ErrInvalidKey = errors.New("invalid object key")

// Info describes a stored object.
type Info struct {
	Key      string
	Size     int64
	Modified time.Time
}

// Store is the object-store contract used by the pipelines.
type Store interface {
	Put(ctx context.Context, key string, data []byte, contentType string) error
	Get(ctx context.Context, key string) ([]byte, error)
	Stat(ctx context.Context, key string) (Info, error)
	// List returns the objects whose key starts with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Info, error)
	Delete(ctx context.Context, key string) error
}
