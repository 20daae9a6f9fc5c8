package smap

import (
	"fmt"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/stages"
)

// storeConfigError is pipelines.StoreConfigError for smap: a stages.Fatal
// error for a permanent object-store configuration error about op, nil
// for any other error.
func storeConfigError(op string, err error) error {
	return pipelines.StoreConfigError("smap", op, err)
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
