// Package kafkasink is a [stages.Sink] that produces pipeline outputs to Kafka
// and returns only after the broker acknowledged every record, so that the
// runtime commits the input offsets after the outputs are durable.
//
// Records of one batch are produced in order; records with the same key land
// in the same partition in that order (the client's default partitioner
// hashes the key). A record too large for its topic, or an item the mapping
// function fails on with a plain or dead-letter error, is rejected (the
// runtime dead-letters its source record; a dead-letter mapping error keeps
// its rule); a mapping error classified as retry or fatal fails the whole
// Write with that classification; an item mapped to no topic is a fatal
// configuration error; other produce failures are returned as transient
// errors and the runtime retries the batch, so a downstream topic may see a
// record twice after a failure (at-least-once); consumers de-duplicate by key
// or event id.
// For exactly-once Kafka→Kafka stages, use the runtime's transactional mode.
//
// A Sink is safe for concurrent use by the runtime's partition workers.
package kafkasink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// Sink produces items converted to records by a mapping function.
type Sink[T any] struct {
	cl    *kgo.Client
	toRec func(T) (*kgo.Record, error)
}

// New returns a sink producing with cl. toRec maps one output to one
// non-nil record.
//
// An error from toRec is read with the vocabulary of package stages:
//
//   - A plain (unclassified) error concerns that item alone: Write rejects
//     the item with rule [RuleMapping] (the runtime dead-letters its source
//     record with reason sink_rejected) and produces the rest of the batch.
//   - A [stages.DeadLetter] error concerns that item alone too, and the
//     caller's classification is kept: the rejection carries the caller's
//     rule (an empty one included), not [RuleMapping], and its Err wraps the
//     caller's error, so [stages.Classify] of it still reports the caller's
//     reason. (The runtime reads that classification: it dead-letters the
//     source record with the caller's reason as dlq.reason — sink_rejected
//     only when that reason is not one of the design's — and the caller's
//     message in dlq.error.)
//   - A [stages.Retry] or [stages.RetryAfter] error fails the whole Write
//     with that classification before anything is produced: the runtime
//     retries the batch with its sink backoff, waiting at least a
//     RetryAfter error's wait.
//   - A [stages.Fatal] error fails the whole Write as fatal before anything
//     is produced, so that the runner stops; it is never turned into a
//     dead letter, which would commit past an item the caller said must not
//     be skipped.
//
// toRec may return the same record for several items of one batch (a
// cached record): each occurrence after the first is produced from a
// shallow copy, and every item is written or rejected on its own. The
// client sets the produced record's partition, offset and timestamp, so a
// record must not be returned to Writes that may run concurrently (the
// runtime's partition workers share the sink).
//
// A record without a Topic, when cl has no [kgo.DefaultProduceTopic], and a
// nil record with a nil error are configuration errors that would fail for
// every item: Write returns them as [stages.Fatal], which stops the runner.
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
// An item the mapping function fails on (rule [RuleMapping], or the
// caller's rule for a [stages.DeadLetter] error; see [New]) and a record
// the topic can never take (larger than its max.message.bytes, or than the
// client's ProducerBatchMaxBytes; rule [RuleTooLarge]) are returned as
// [*stages.Rejections] items, so that the runtime dead-letters their source
// records instead of retrying the batch for ever; the other items are
// produced. An item mapped to no topic fails the Write with a
// [stages.Fatal] error before anything is produced. The broker refuses a whole
// produce batch that is too large, records that would fit alone included,
// so after such a refusal the records from the first refused one on are
// produced again one at a time, in batch order (records of one partition
// stay in order; some may be written twice). Any other failure is
// transient and fails the whole Write.
//
// Rejections name batch indices, in ascending order, each at most once: on a
// nil or *stages.Rejections return every item of the batch was either
// acknowledged by the broker or rejected, never both and never neither. The
// same *kgo.Record appearing at several positions of a Records batch is
// produced once per position (from a copy after the first), and each
// position is accounted for on its own.
func (s *Sink[T]) Write(ctx context.Context, batch []T) error {
	var rej stages.Rejections
	recs := make([]*kgo.Record, 0, len(batch))
	pos := make([]int, 0, len(batch)) // pos[j]: index in batch of recs[j]
	// index[recs[j]] == j: the records are distinct pointers (duplicates
	// are copied below), so a produce result maps back to one position.
	index := make(map[*kgo.Record]int, len(batch))
	for i, it := range batch {
		r, err := s.toRec(it)
		if err != nil {
			rule := RuleMapping
			var c *stages.Error
			if errors.As(err, &c) {
				if c.Kind != stages.KindDeadLetter {
					// Retry or fatal: the whole Write fails with that
					// classification, before anything is produced.
					return fmt.Errorf("kafkasink: map item %d: %w", i, err)
				}
				rule = c.Rule // the caller's rule, empty ones included
			}
			rej.Items = append(rej.Items, stages.Rejection{Index: i, Rule: rule,
				Err: fmt.Errorf("kafkasink: map item %d: %w", i, err)})
			continue
		}
		if r == nil {
			return stages.Fatal(fmt.Errorf("kafkasink: item %d: the mapping function returned neither a record nor an error", i))
		}
		if r.Topic == "" && s.cl.OptValue(kgo.DefaultProduceTopic) == "" {
			return stages.Fatal(fmt.Errorf("kafkasink: item %d maps to a record without a topic and the client has no default produce topic (kgo.DefaultProduceTopic): fix the mapping function or the client configuration", i))
		}
		if _, dup := index[r]; dup {
			// The same record twice in one batch (a mapping function that
			// returns a cached record, or a Records batch holding one
			// pointer twice): produce a copy, so that every batch position
			// has its own record, its own produce result and its own
			// rejection.
			c := *r
			r = &c
		}
		index[r] = len(recs)
		recs = append(recs, r)
		pos = append(pos, i)
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
	for j := first; first >= 0 && j < len(recs); j++ {
		err := s.cl.ProduceSync(ctx, recs[j]).FirstErr()
		switch {
		case err == nil:
		case tooLarge(err):
			rej.Items = append(rej.Items, stages.Rejection{Index: pos[j], Rule: RuleTooLarge,
				Err: fmt.Errorf("kafkasink: record of %d bytes to %s: %w", len(recs[j].Key)+len(recs[j].Value), recs[j].Topic, err)})
		default:
			return fmt.Errorf("kafkasink: produce record %d of %d: %w", j, len(recs), err)
		}
	}
	if len(rej.Items) == 0 {
		return nil
	}
	slices.SortFunc(rej.Items, func(a, b stages.Rejection) int { return cmp.Compare(a.Index, b.Index) })
	return &rej
}

// Rules of the rejections Write returns.
const (
	// RuleTooLarge: the record is too large for its topic.
	RuleTooLarge = "kafka.too_large"
	// RuleMapping: the mapping function failed on the item.
	RuleMapping = "kafka.mapping"
)

// tooLarge reports whether a produce error says the record (or its batch)
// is larger than the broker or the client accepts.
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}
