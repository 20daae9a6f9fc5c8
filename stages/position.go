package stages

import "context"

// Position is where a batch handed to a [Sink]'s Write ends in its source
// partition, and who wrote it: what a sink that stores its consumer
// offsets in the same transaction as its effects (exactly-once effects)
// stores. The runtime (package stages/run) puts it in Write's context only
// when the runner was given an offset store (run.WithOffsetStore); see
// [PositionOf].
type Position struct {
	// Group is the consumer group of the runner.
	Group string
	// Topic and Partition are the batch's source partition (a batch is
	// always of one partition).
	Topic     string
	Partition int32
	// Next is the offset after the batch's last record: where the
	// partition resumes once the batch is durable.
	Next int64
	// LeaderEpoch is the leader epoch of the batch's last record (-1:
	// unknown).
	LeaderEpoch int32
	// Epoch is the owner epoch the runtime claimed from the offset store
	// when this member was assigned the partition: greater than that of
	// every previous owner. A sink storing the offset must refuse the
	// write (roll back the whole batch) when the store holds a greater
	// epoch for the partition: a newer owner has claimed it since.
	Epoch int32
}

type positionKey struct{}

// WithPosition returns ctx carrying p; the runtime calls it for each Write
// of a runner with an offset store.
func WithPosition(ctx context.Context, p Position) context.Context {
	return context.WithValue(ctx, positionKey{}, p)
}

// PositionOf returns the position of the batch whose Write was called with
// ctx. ok is false when the runner has no offset store.
func PositionOf(ctx context.Context) (p Position, ok bool) {
	p, ok = ctx.Value(positionKey{}).(Position)
	return p, ok
}
