// Package kafkasink is a [stages.Sink] that produces pipeline outputs to Kafka
// and returns only after the broker acknowledged every record, so that the
// runtime commits the input offsets after the outputs are durable.
//
// Records of one batch are produced in order; records with the same key land
// in the same partition in that order (the client's default partitioner
// hashes the key). A record too large for its topic is rejected (the
// runtime dead-letters its source record); other produce failures are
// returned as transient errors and the runtime retries the batch, so a
// downstream topic may see a record twice after a failure (at-least-once);
// consumers de-duplicate by key or event id.
// For exactly-once Kafka→Kafka stages, use the runtime's transactional mode.
//
// A Sink is safe for concurrent use by the runtime's partition workers.
package kafkasink

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
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
//
// A record the topic can never take (larger than its max.message.bytes, or
// than the client's ProducerBatchMaxBytes) is returned as a
// [*stages.Rejections] item, so that the runtime dead-letters its source
// record instead of retrying the batch for ever. The broker refuses a whole
// produce batch that is too large, records that would fit alone included,
// so after such a refusal the records from the first refused one on are
// produced again one at a time, in batch order (records of one partition
// stay in order; some may be written twice). Any other failure is
// transient and fails the whole Write.
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
	index := make(map[*kgo.Record]int, len(recs))
	for i, r := range recs {
		index[r] = i
	}
	first := -1 // the first record refused as too large
	var other error
	for _, res := range s.cl.ProduceSync(ctx, recs...) {
		switch {
		case res.Err == nil:
		case tooLarge(res.Err):
			if i := index[res.Record]; first < 0 || i < first {
				first = i
			}
		case other == nil:
			other = res.Err
		}
	}
	if other != nil {
		return fmt.Errorf("kafkasink: produce %d records: %w", len(recs), other)
	}
	if first < 0 {
		return nil
	}
	var rej stages.Rejections
	for i := first; i < len(recs); i++ {
		err := s.cl.ProduceSync(ctx, recs[i]).FirstErr()
		switch {
		case err == nil:
		case tooLarge(err):
			rej.Items = append(rej.Items, stages.Rejection{Index: i, Rule: RuleTooLarge,
				Err: fmt.Errorf("kafkasink: record of %d bytes to %s: %w", len(recs[i].Key)+len(recs[i].Value), recs[i].Topic, err)})
		default:
			return fmt.Errorf("kafkasink: produce record %d of %d: %w", i, len(recs), err)
		}
	}
	if len(rej.Items) == 0 {
		return nil
	}
	return &rej
}

// RuleTooLarge is the rule of a rejection for a record too large for its
// topic.
const RuleTooLarge = "kafka.too_large"

// tooLarge reports whether a produce error says the record (or its batch)
// is larger than the broker or the client accepts.
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}
