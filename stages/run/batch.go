package run

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/stages"
	"github.com/twmb/franz-go/pkg/kgo"
)

// pending accumulates the effects of a batch until they are flushed.
type pending[Out any] struct {
	outs   []Out
	owners []int // owners[i] is the batch index of the record that produced outs[i]
	dlq    []*kgo.Record
	labels [][2]string // reason and rule of dlq[i], for the metrics
	dlqIdx []uint64    // bit i: batch record i has its dead letter in dlq
}

// reset empties p for the next batch of a worker (see worker.pending),
// dropping its references to outputs and dead letters, and arrays that
// grew beyond keepPending entries.
func (p *pending[Out]) reset() {
	clear(p.outs)
	clear(p.dlq)
	p.outs, p.owners, p.dlq, p.labels, p.dlqIdx = p.outs[:0], p.owners[:0], p.dlq[:0], p.labels[:0], p.dlqIdx[:0]
	if cap(p.outs) > keepPending || cap(p.dlq) > keepPending || cap(p.owners) > keepPending || cap(p.labels) > keepPending {
		*p = pending[Out]{}
	}
}

// keepPending bounds the entries of the slices a worker's pending keeps
// from one batch to the next.
const keepPending = 1 << 14

// handle processes a batch. Records before a stop or a fatal error are still
// flushed and committed; the rest is left for redelivery.
func (w *worker[In, Out]) handle(batch []*kgo.Record) error {
	batch, p, done, stopErr := w.process(batch)
	if done > 0 {
		if err := w.flush(batch[:done], p); err != nil {
			return err
		}
	}
	return stopErr
}

// process runs decode and the stage for the records of batch: in order,
// or with Config.KeyConcurrency above 1 concurrently by key (see
// processByKey). It returns the outputs and dead letters of the records
// before the first one not handled, in batch order, how many those are
// (all unless a fatal error or an abandon stopped a record) and that
// error, with the batch (grown by processByKey).
func (w *worker[In, Out]) process(batch []*kgo.Record) (_ []*kgo.Record, p *pending[Out], done int, stopErr error) {
	r := w.r
	r.m.batchSize.Observe(float64(len(batch)))
	r.m.in.WithLabelValues(w.tp.topic).Add(float64(dataRecords(batch)))
	p = &pending[Out]{}
	if w.win != nil {
		// A window takes the batch's outputs (window.add) and dead
		// letters (produceDLQ) before its next batch: handleWindowed
		// resets w.pend once they are taken, before the window may be
		// written. A batch's outputs go to the sink, which may keep
		// their slice.
		p = &w.pend
	}
	start := time.Now()
	defer func() { r.m.batchDur.WithLabelValues("process").Observe(time.Since(start).Seconds()) }()
	if r.cfg.KeyConcurrency > 1 {
		return w.processByKey(batch, p)
	}
	for i, rec := range batch {
		if rec.Attrs.IsControl() {
			continue // a transaction marker (see WithKafkaOpts): its offset commits with the batch
		}
		outs, dl, err := w.processOne(rec)
		if err != nil {
			return batch, p, i, err
		}
		p.add(i, outs, dl)
	}
	return batch, p, len(batch), nil
}

// add records the outputs and the dead letter (if any) of batch record i.
func (p *pending[Out]) add(i int, outs []Out, dl dlqItem) {
	if dl.rec != nil {
		p.addDLQ(i, dl) // with the outputs of a stages.DeadLetterWith
	}
	for _, o := range outs {
		p.outs = append(p.outs, o)
		p.owners = append(p.owners, i)
	}
}

// addDLQ queues the dead letter d of batch record i, once per record.
func (p *pending[Out]) addDLQ(i int, d dlqItem) {
	word, bit := i/64, uint64(1)<<(i%64)
	if word >= len(p.dlqIdx) {
		p.dlqIdx = append(p.dlqIdx, make([]uint64, word+1-len(p.dlqIdx))...)
	}
	if p.dlqIdx[word]&bit != 0 {
		return
	}
	p.dlqIdx[word] |= bit
	p.dlq = append(p.dlq, d.rec)
	p.labels = append(p.labels, [2]string{string(d.reason), d.rule})
}

// processOne decodes and runs the stage for one record, with retries and
// waits. It returns the outputs, a dead letter (rec set; with outputs
// only for a [stages.DeadLetterWith]), or an error (errAbandoned or fatal).
// The stage sees its attempt number in Msg.Attempt (a retry error
// increments it, a [stages.Wait] calls the stage again with the same one)
// and its previous call's error in Msg.PrevErr.
func (w *worker[In, Out]) processOne(rec *kgo.Record) ([]Out, dlqItem, error) {
	r := w.r
	in, err := w.callDecode(rec)
	if err != nil {
		c := stages.Classify(err)
		if c.Kind != stages.KindDeadLetter {
			c = &stages.Error{Kind: stages.KindDeadLetter, Reason: stages.ReasonDecodeError, Err: err}
		}
		return nil, w.dlqRecord(rec, c, 1, r.cfg.Name+"/decode"), nil
	}
	msg := stages.Msg[In]{Key: string(rec.Key), Value: in, Source: stages.Source{
		Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp,
	}, Attempt: 1, MaxAttempts: r.cfg.Retry.MaxAttempts}
	if len(rec.Headers) > 0 {
		msg.Headers = make([]stages.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			msg.Headers[i] = stages.Header{Key: h.Key, Value: h.Value}
		}
	}
	for {
		t0 := time.Now()
		outs, err := w.callStage(msg)
		r.m.stageDur.Observe(time.Since(t0).Seconds())
		if err == nil {
			r.m.out.Add(float64(len(outs)))
			return outs, dlqItem{}, nil
		}
		// A cancelled worker, or a stage that gave up its record because
		// the worker is stopping (stages.ErrStopped): the record is left
		// for redelivery, neither retried nor dead-lettered.
		if w.ctx.Err() != nil || (errors.Is(err, stages.ErrStopped) && w.isStopping()) {
			return nil, dlqItem{}, errAbandoned
		}
		attempt := msg.Attempt
		c := stages.Classify(err)
		switch c.Kind {
		case stages.KindDeadLetter:
			dl := w.dlqRecord(rec, c, attempt, r.o.stageName)
			if !c.WithOutputs {
				outs = nil
			}
			r.m.out.Add(float64(len(outs)))
			return outs, dl, nil
		case stages.KindFatal:
			return nil, dlqItem{}, fmt.Errorf("stage %s at %s/%d@%d: %w", r.o.stageName, rec.Topic, rec.Partition, rec.Offset, err)
		case stages.KindWait:
			if !w.wait(rec, attempt, c) {
				return nil, dlqItem{}, errAbandoned
			}
			msg.PrevErr = err
			continue
		}
		if attempt >= r.cfg.Retry.MaxAttempts {
			ex := &stages.Error{Kind: stages.KindDeadLetter, Reason: stages.ReasonRetriesExhausted, Rule: c.Rule, Err: c.Err}
			return nil, w.dlqRecord(rec, ex, attempt, r.o.stageName), nil
		}
		r.m.retries.WithLabelValues("stage").Inc()
		wait := retryWait(r.cfg.Retry, attempt, c.After)
		r.o.log.Debug("stage retry", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "attempt", attempt, "wait", wait, "err", err)
		if !w.sleep(wait) {
			return nil, dlqItem{}, errAbandoned
		}
		msg.Attempt, msg.PrevErr = msg.Attempt+1, err
	}
}

// wait carries out the [stages.Wait] c of rec's stage call at attempt:
// it waits c.After (bounded by waitBounds) with the partition's fetches
// paused, counting the wait and the time waited. It returns false when the
// worker must stop instead.
func (w *worker[In, Out]) wait(rec *kgo.Record, attempt int, c *stages.Error) bool {
	r := w.r
	d := waitBounds(c.After)
	r.m.waits.Inc()
	r.o.log.Debug("stage wait", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "attempt", attempt, "wait", d, "err", c.Err)
	t0 := time.Now()
	ok := w.sleep(d)
	r.m.waitSeconds.Add(time.Since(t0).Seconds())
	return ok
}

// minWait is the shortest [stages.Wait] honoured, so that a stage asking
// for no wait cannot spin its partition.
const minWait = 10 * time.Millisecond

// waitBounds returns the wait of a [stages.Wait] that asked for d: d
// within [minWait, maxRetryAfter].
func waitBounds(d time.Duration) time.Duration { return min(max(d, minWait), maxRetryAfter) }

// callDecode runs the decoder; a panic is a decode error (the record is
// dead-lettered as decode_error), as a stage panic is an exception.
func (w *worker[In, Out]) callDecode(rec *kgo.Record) (in In, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero In
			in, err = zero, fmt.Errorf("decoder panic: %v", p)
		}
	}()
	return w.r.decode(rec.Key, rec.Value)
}

// callStage runs the stage, turning a panic into an "exception" dead letter
// so that one bad record cannot stop its partition.
func (w *worker[In, Out]) callStage(msg stages.Msg[In]) (outs []Out, err error) {
	defer func() {
		if p := recover(); p != nil {
			outs, err = nil, stages.DeadLetter(stages.ReasonException, "", fmt.Errorf("stage panic: %v", p))
		}
	}()
	if w.r.cfg.KeyConcurrency <= 1 { // processByKey marks its whole run
		defer w.doing(blockedStage)()
	}
	return w.r.stage(w.sctx, msg)
}

// write hands outs to the sink with one Write, retrying transient failures
// (with the partition's fetches paused) until it succeeds or the worker
// stops. The wait before a retry is Config.SinkRetry's backoff, or longer
// when the error is a [stages.RetryAfter] (see retryWait). A
// *stages.Rejections goes to rejected, which dead-letters (or queues) the
// records behind it; an error of rejected counts as transient and retries
// the write, except errInvalidRejection (a sink that rejected an index
// outside its batch) and a fatal error (a dead letter that does not fit the
// DLQ topic even as a stub), which are returned. Once the Write succeeded,
// a [Publisher] sink's records for it go to the runtime's producer
// (publish).
func (w *worker[In, Out]) write(outs []Out, rejected func(rej *stages.Rejections, attempt int) error) error {
	r := w.r
	t0 := time.Now()
	var rej *stages.Rejections // of the Write that succeeded
	for attempt := 1; ; attempt++ {
		ts := time.Now()
		undo := w.doing(blockedSink)
		err := r.sink.Write(w.sinkCtx(), outs)
		undo()
		r.m.sinkDur.Observe(time.Since(ts).Seconds())
		rej = nil
		if err == nil {
			break
		}
		if errors.As(err, &rej) {
			if err = rejected(rej, attempt); err == nil {
				break
			}
			if errors.Is(err, errInvalidRejection) || stages.Classify(err).Kind == stages.KindFatal {
				return err
			}
		} else if stages.Classify(err).Kind == stages.KindFatal {
			return fmt.Errorf("sink: %w", err)
		}
		r.m.retries.WithLabelValues("sink").Inc()
		wait := retryWait(r.cfg.SinkRetry, attempt, stages.Classify(err).After)
		r.o.log.Warn("sink write failed, retrying", "topic", w.tp.topic, "partition", w.tp.partition, "attempt", attempt, "wait", wait, "err", err)
		if !w.sleep(wait) {
			return errAbandoned
		}
	}
	r.m.batchDur.WithLabelValues("write").Observe(time.Since(t0).Seconds())
	return w.publish(outs, rej)
}

// maxRetryAfter caps the wait a [stages.RetryAfter] error asks for, so
// that a nonsensical wait (a misread Retry-After, hours) cannot park a
// partition for that long; the error is retried after the cap and may ask
// again.
const maxRetryAfter = 5 * time.Minute

// retryWait returns the wait before attempt number attempt+1 (attempt ≥ 1)
// under policy p when the failed attempt's error asked for at least after
// (the After of a [stages.RetryAfter], 0 otherwise): p's backoff, or after
// (capped at maxRetryAfter) when that is longer.
func retryWait(p RetryPolicy, attempt int, after time.Duration) time.Duration {
	return max(min(after, maxRetryAfter), p.Backoff(attempt))
}

// errInvalidRejection reports a sink that rejected an index outside the
// batch it was given.
var errInvalidRejection = errors.New("sink rejected an item outside its batch")

// flush writes the batch's outputs, dead-letters rejected and failed records,
// produces the changelog records of its state writes, and marks the batch's
// offsets for commit — in that order, each step durable before the next.
func (w *worker[In, Out]) flush(batch []*kgo.Record, p *pending[Out]) error {
	r := w.r
	if pos, ok, err := w.storedOnly(batch, p); err != nil { // WithOffsetStore (offsetstore.go)
		return err
	} else if ok {
		w.wpos = &pos
		defer func() { w.wpos = nil }()
	}
	if len(p.outs) > 0 {
		err := w.write(p.outs, func(rej *stages.Rejections, attempt int) error {
			for _, it := range rej.Items {
				if it.Index < 0 || it.Index >= len(p.owners) {
					return fmt.Errorf("%w: item %d of a %d-item batch", errInvalidRejection, it.Index, len(p.owners))
				}
				i := p.owners[it.Index]
				p.addDLQ(i, w.dlqRecord(batch[i], sinkRejection(it.Rule, it.Err), attempt, r.cfg.Name+"/sink"))
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(p.dlq) > 0 {
		if err := w.produceDLQ(p); err != nil {
			return err
		}
	}
	// State stores: the batch's changelog records, after its outputs and
	// dead letters, before its offsets (changelog.go), unless they wait
	// for the next flush with WithStateFlushEvery (statecoalesce.go).
	if w.deferState(batch, p) {
		return nil
	}
	if err := w.flushState(); err != nil {
		return err
	}
	if w.lost.Load() {
		return errAbandoned
	}
	return w.markDone(batch[len(batch)-1], dataRecords(batch)+w.unflushed.take())
}

// markDone marks the offset after last for commit once the effects of
// the records up to it (records of them) are durable: with the group client
// (committed every CommitInterval), or with Config.DLQCommit
// DLQTransactional by handing it to the committer together with the dead
// letters and published records the worker holds, which then commit with it
// (see txnCommitter).
func (w *worker[In, Out]) markDone(last *kgo.Record, records int) error {
	r := w.r
	off := kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
	w.pos.Store(off.Offset)
	if r.txn == nil {
		r.cl.MarkCommitOffsets(map[string]map[int32]kgo.EpochOffset{last.Topic: {last.Partition: off}})
		r.m.committed.WithLabelValues(last.Topic).Add(float64(records))
		return nil
	}
	defer w.doing(blockedCommit)()
	dlq, err := w.held.records(r.cfg.DLQTopic)
	if err != nil {
		return stages.Fatal(err)
	}
	// The committer holds the dead letters unpacked, as records: they
	// count at their records' bytes in its bound (txnMaxBytes), not at
	// the compressed size they held in the worker.
	n := recordsBytes(dlq) + recordsBytes(w.held.events)
	if !r.txn.submit(w.ctx, w.owner, off, records, dlq, w.held.labels, w.held.events, n) {
		return errAbandoned
	}
	w.releaseRecords(w.held.bytes)
	w.held = heldDLQ{scratch: w.held.scratch, encBuf: w.held.encBuf}
	return nil
}
