package smap

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
)

// storeConfigError returns a stages.Fatal error when err is a permanent
// object-store error that is not about one key (objstore.IsPermanent but
// not objstore.ErrInvalidKey): wrong credentials, a missing bucket or
// access denied. No record can succeed until the configuration is fixed,
// so the runner stops without committing the record and without a dead
// letter. The message names the S3 code and bucket. It returns nil for any
// other error.
func storeConfigError(op string, err error) error {
	if !objstore.IsPermanent(err) || errors.Is(err, objstore.ErrInvalidKey) {
		return nil
	}
	code, bucket := objstore.S3Code(err)
	if bucket == "" {
		bucket = "(not named by the server)"
	}
	return stages.Fatal(fmt.Errorf("smap: object store refuses %s: S3 error %s on bucket %s; fix the object store's configuration (S3_BUCKET, credentials, policy): %w", op, code, bucket, err))
}

// storeRetry classifies an object-store error of a stage: fatal for a
// permanent configuration error (see storeConfigError), retried otherwise.
func storeRetry(op string, err error) error {
	if fatal := storeConfigError(op, err); fatal != nil {
		return fatal
	}
	return stages.Retry(err)
}

// clipKey quotes an object key for a message, clipped to 200 bytes.
func clipKey(key string) string { return fmt.Sprintf("%.200q", key) }
