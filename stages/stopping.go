package stages

import (
	"context"
	"errors"
)

// ErrStopped is wrapped by the error of a stage that gave up a record
// because the runtime asked its partition to stop (see [Stopping]). While
// the partition is in fact stopping, the runtime neither retries nor
// dead-letters such a record and commits nothing from it on: the
// partition's next owner (or the restarted process) processes it again.
// Returned at any other time it is an ordinary error (retried, then
// dead-lettered as retries_exhausted), so a stage returns it only after
// Stopping's channel closed.
var ErrStopped = errors.New("stage gave up: its partition is stopping (revoked or shutting down)")

type stoppingKey struct{}

// WithStopping returns a copy of ctx carrying stopping, a channel the
// runtime closes when it asks the partition the stage works for to stop.
// Runtimes call it on the context they pass to a stage; see [Stopping].
func WithStopping(ctx context.Context, stopping <-chan struct{}) context.Context {
	return context.WithValue(ctx, stoppingKey{}, stopping)
}

// Stopping returns the channel closed when the runtime asks the partition
// of the record a stage is handling to stop: the partition was revoked or
// the runner is shutting down. The runtime lets the current batch finish
// then and cancels the stage's context only after its revoke timeout (see
// package stages/run), so a stage in a long wait of its own — a backoff
// between its own retries — should end the wait when this channel closes
// and return an error wrapping [ErrStopped]; the record is then left for
// redelivery. The channel is nil (never ready) when ctx carries none.
//
// stages/run's Runner closes it. Its transactional runner does not: there
// a shutdown cancels the stage's context at once, and a revoke lets the
// stage finish while the partition's transaction is aborted, so a stage
// should wait on ctx.Done() as well.
func Stopping(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(stoppingKey{}).(<-chan struct{})
	return ch
}
