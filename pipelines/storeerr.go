package pipelines

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
)

// StoreConfigError returns a stages.Fatal error when err is a permanent
// object-store error that is not about one key (objstore.IsPermanent but
// not objstore.ErrInvalidKey): wrong credentials, a missing bucket or
// access denied. No record can succeed until the configuration is fixed,
// so the runner stops without committing the record and without a dead
// letter. The message, prefixed with pipeline, says what the store refused
// and names the S3 code and bucket. It returns nil for any other error.
func StoreConfigError(pipeline, what string, err error) error {
	if !objstore.IsPermanent(err) || errors.Is(err, objstore.ErrInvalidKey) {
		return nil
	}
	code, bucket := objstore.S3Code(err)
	if bucket == "" {
		bucket = "(not named by the server)"
	}
	return stages.Fatal(fmt.Errorf("%s: object store refuses %s: S3 error %s on bucket %s; fix the object store's configuration (S3_BUCKET, credentials, policy): %w",
		pipeline, what, code, bucket, err))
}
