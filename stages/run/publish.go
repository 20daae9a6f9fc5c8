package run

import (
	"cmp"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// Publisher is implemented by a sink of a batch [Runner] whose effect is
// announced by Kafka records (events that follow a database write, or that
// are the whole effect). The runner, not the sink, produces them: after
// each Write that succeeded it calls Records with the items that Write made
// durable (its batch less the items of a [stages.Rejections]), in batch
// order, and takes the records it returns (Topic set; the runner owns them
// from then on). Records must not block, fail or keep the slice; it is
// called from the partition's worker, for one partition at a time.
//
// Ordering: a partition's records are produced in the order of its batches,
// each batch's after its Write returned (so a reader that sees a record can
// rely on the write behind it), and never before the batch's Write.
//
// With Config.DLQCommit DLQTransactional (the default) the records are held
// with the batch's dead letters and produced in the Kafka transaction that
// commits the batch's offsets: a read_committed reader sees each exactly
// once, across kill -9, rebalances, fencing and broker restarts. When that
// transaction aborts (a refused offset commit, a failed end, a member
// killed mid-commit, whose transaction the broker aborts), none of its
// records becomes visible: a commit that failed is retried with the same
// records by the same member, and a batch whose member lost its partition
// or died is processed again by the next owner, whose Write redoes the
// effect (so the effect must be idempotent, as every sink's is) and whose
// Records are produced in its own transaction. The cost is latency: unlike
// dead letters, records do not start a commit; they become visible with the
// next periodic commit, up to Config.CommitInterval (default 1s) plus a
// transaction's round trips after their Write, and every commit that
// carries records is a transaction. Readers must read with
// kgo.FetchIsolationLevel(kgo.ReadCommitted()); read_uncommitted readers
// also see the records of aborted transactions. Held records count in the
// memory budget and in the committer's bound on held bytes.
//
// With DLQAtLeastOnce, or NoDLQ, the records are produced right after the
// Write, retried until acknowledged, before the batch's offsets are marked:
// at least once (a crash before the commit produces them again).
//
// A record its topic refuses as too large is a fatal error (the runner
// stops; the batch's offsets are not committed). Not supported with
// [WithOffsetStore] (the offsets commit with the sink's effect there, so a
// batch whose transaction aborted would never be written again and its
// records would be lost) nor with [WithTimers] (a firing has no offset to
// commit its records with); New refuses both.
type Publisher[T any] interface {
	Records(written []T) []*kgo.Record
}

// checkPublisher refuses the options a Publisher sink cannot work with.
func checkPublisher(cfg Config, o options, pub bool) error {
	switch {
	case !pub:
		return nil
	case o.offsets != nil:
		return fmt.Errorf("pipeline %s: a sink that publishes records (run.Publisher) cannot use WithOffsetStore", cfg.Name)
	case o.timers != nil:
		return fmt.Errorf("pipeline %s: a sink that publishes records (run.Publisher) cannot use WithTimers", cfg.Name)
	}
	return nil
}

// publish hands the records of the items of outs a Write made durable
// (all but those rej rejected) to the runtime's producer: held for the
// committer's transaction with DLQTransactional, else produced at once
// (produceAtOnce).
func (w *worker[In, Out]) publish(outs []Out, rej *stages.Rejections) error {
	r := w.r
	if r.pub == nil {
		return nil
	}
	written := outs
	if rej != nil && len(rej.Items) > 0 {
		skip := make(map[int]bool, len(rej.Items))
		for _, it := range rej.Items {
			skip[it.Index] = true
		}
		written = make([]Out, 0, len(outs)-len(skip))
		for i, o := range outs {
			if !skip[i] {
				written = append(written, o)
			}
		}
	}
	if len(written) == 0 {
		return nil
	}
	recs := r.pub.Records(written)
	for _, rec := range recs {
		if rec == nil || rec.Topic == "" {
			return stages.Fatal(fmt.Errorf("sink %T published a record without a topic", r.sink))
		}
	}
	if len(recs) == 0 {
		return nil
	}
	if r.txn != nil {
		n := recordsBytes(recs)
		w.holdRecords(n)
		w.held.bytes += n
		w.held.events = append(w.held.events, recs...)
		return nil
	}
	return w.produceAtOnce(recs)
}

// produceAtOnce produces a Publisher's records outside a transaction,
// retrying those that failed until they are acknowledged or the worker
// stops.
func (w *worker[In, Out]) produceAtOnce(recs []*kgo.Record) error {
	defer w.doing(blockedSink)()
	return w.produceAcked(recs, "sink", "producing the sink's records failed, retrying", errEventTooLarge)
}

// produceAcked produces recs until each is acknowledged, in order: records
// that failed are produced again after Config.SinkRetry's backoff (counted
// in sluice_retries_total{kind}, logged with msg) until the worker stops
// (errAbandoned). A record refused as too large goes to large with its
// error, in order after the batch's other results: nil means it is done, a
// fatal error stops (returned), any other error has it produced again with
// the rest.
func (w *worker[In, Out]) produceAcked(recs []*kgo.Record, kind, msg string, large func(*kgo.Record, error) error) error {
	r := w.r
	for attempt := 1; ; attempt++ {
		var failed []*kgo.Record
		var big []kgo.ProduceResult
		var err error
		for _, res := range r.cl.ProduceSync(w.ctx, recs...) {
			switch {
			case res.Err == nil:
			case tooLarge(res.Err):
				big = append(big, res)
			default:
				failed = append(failed, res.Record)
				err = cmp.Or(err, res.Err)
			}
		}
		for _, res := range big {
			lerr := large(res.Record, res.Err)
			switch {
			case lerr == nil:
			case stages.Classify(lerr).Kind == stages.KindFatal:
				return lerr
			default:
				failed = append(failed, res.Record)
				err = cmp.Or(err, lerr)
			}
		}
		if len(failed) == 0 {
			return nil
		}
		recs = failed
		r.m.retries.WithLabelValues(kind).Inc()
		r.o.log.Warn(msg, "topic", failed[0].Topic, "records", len(failed), "attempt", attempt, "err", err)
		if !w.sleep(r.cfg.SinkRetry.Backoff(attempt)) {
			return errAbandoned
		}
	}
}

// errEventTooLarge is the fatal error of a Publisher's record that its
// topic refuses as too large: no retry can produce it.
func errEventTooLarge(rec *kgo.Record, err error) error {
	return stages.Fatal(fmt.Errorf("a record the sink published to %s (%d bytes) is refused as too large (raise the topic's max.message.bytes): %w",
		rec.Topic, recordBytes(rec), err))
}
