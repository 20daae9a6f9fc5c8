// Package kafkasink is a [stages.Sink] that produces pipeline outputs to Kafka
// and returns only after the broker acknowledged every record, so that the
// runtime commits the input offsets after the outputs are durable.
//
// Records of one batch are produced in order; records with the same key land
// in the same partition in that order (the client's default partitioner
// hashes the key). Produce failures are returned as transient errors and the
// runtime retries the batch, so a downstream topic may see a record twice
// after a failure (at-least-once); consumers de-duplicate by key or event id.
// For exactly-once Kafka→Kafka stages, use the runtime's transactional mode.
//
// A Sink is safe for concurrent use by the runtime's partition workers.
package kafkasink

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Sink produces items converted to records by a mapping function.
type Sink[T any] struct {
	cl    *kgo.Client
	toRec func(T) (*kgo.Record, error)
}

// New returns a sink producing with cl. toRec maps one output to one record
// (its Topic must be set); an error from toRec is returned as a failure of
// the whole batch (a programming error: it would fail again on retry).
func New[T any](cl *kgo.Client, toRec func(T) (*kgo.Record, error)) *Sink[T] {
	return &Sink[T]{cl: cl, toRec: toRec}
}

// Records returns a sink whose items already are records.
func Records(cl *kgo.Client) *Sink[*kgo.Record] {
	return New(cl, func(r *kgo.Record) (*kgo.Record, error) { return r, nil })
}

// Write implements stages.Sink: it produces the batch and waits for every
// acknowledgement.
func (s *Sink[T]) Write(ctx context.Context, batch []T) error {
	recs := make([]*kgo.Record, 0, len(batch))
	for i, it := range batch {
		r, err := s.toRec(it)
		if err != nil {
			return fmt.Errorf("kafkasink: item %d: %w", i, err)
		}
		if r.Topic == "" && s.cl.OptValue(kgo.DefaultProduceTopic) == "" {
			return fmt.Errorf("kafkasink: item %d has no topic", i)
		}
		recs = append(recs, r)
	}
	if err := s.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("kafkasink: produce %d records: %w", len(recs), err)
	}
	return nil
}
