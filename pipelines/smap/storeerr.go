package smap

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
)

// storeConfigError is pipelines.StoreConfigError for smap: a stages.Fatal
// error for a permanent object-store configuration error about op, nil
// for any other error.
func storeConfigError(op string, err error) error {
	return pipelines.StoreConfigError("smap", op, err)
}

// storeRetry classifies an object-store error of the collector about op:
// a key the store refuses (objstore.ErrInvalidKey) is a dead letter at
// once (reason sanity_fail, rule smap.object_key), since no retry can
// succeed; a permanent configuration error is fatal (see
// storeConfigError); anything else is retried.
func storeRetry(op string, err error) error {
	if errors.Is(err, objstore.ErrInvalidKey) {
		return stages.DeadLetter(stages.ReasonSanityFail, RuleObjectKey, fmt.Errorf("%s: %w", op, err))
	}
	if fatal := storeConfigError(op, err); fatal != nil {
		return fatal
	}
	return stages.Retry(err)
}

// clipKey quotes an object key for a message, clipped to 200 bytes.
func clipKey(key string) string { return fmt.Sprintf("%.200q", key) }
