package run

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// Pause reasons of a partition; fetches are paused while any is set.
const (
	pauseBackpressure uint8 = 1 << iota
	pauseRetry
)

// errAbandoned reports that a worker was asked to stop while it still had
// uncommitted work; that work is left for redelivery.
var errAbandoned = errors.New("abandoned")

// worker processes one partition in offset order.
type worker[In, Out any] struct {
	r  *Runner[In, Out]
	tp tp

	mu     sync.Mutex
	queue  []*kgo.Record
	wake   chan struct{} // cap 1: records were pushed
	paused uint8         // pause reasons, guarded by pmu
	pmu    sync.Mutex
	// abandoned (guarded by pmu): the runner stopped waiting for this
	// worker, or the worker exited; it no longer touches its partition's
	// fetch state.
	abandoned bool

	stopping chan struct{} // closed: finish the current batch, then exit
	ctx      context.Context
	sctx     context.Context    // the stage's: ctx carrying stopping (stages.Stopping)
	cancel   context.CancelFunc // abandon now
	done     chan struct{}
	lost     atomic.Bool
	hwm      atomic.Int64 // the partition's high watermark at the last fetch
	// next is the offset after the last record pushed, -1 before the first
	// push; used by the poll loop only (see Runner.noteSkipped).
	next int64

	win *window[Out] // open coalescing window; nil when windows are off
}

func newWorker[In, Out any](r *Runner[In, Out], k tp) *worker[In, Out] {
	ctx, cancel := context.WithCancel(r.base)
	w := &worker[In, Out]{
		r: r, tp: k,
		wake:     make(chan struct{}, 1),
		stopping: make(chan struct{}),
		ctx:      ctx, cancel: cancel,
		done: make(chan struct{}),
		next: -1,
	}
	w.sctx = stages.WithStopping(ctx, w.stopping)
	if r.merger != nil {
		w.win = newWindow(r.merger, &r.m.windowKeys)
	}
	return w
}

// push appends fetched records and records the partition's high watermark;
// it never blocks. The poll loop bounds the queue (see
// Runner.waitForCapacity).
func (w *worker[In, Out]) push(recs []*kgo.Record, hwm int64) {
	w.hwm.Store(hwm)
	w.mu.Lock()
	w.queue = append(w.queue, recs...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// full reports whether the queue is at MaxInFlight and the partition is not
// already paused for backpressure.
func (w *worker[In, Out]) full() bool {
	if w.queued() < w.r.cfg.MaxInFlight {
		return false
	}
	w.pmu.Lock()
	defer w.pmu.Unlock()
	return w.paused&pauseBackpressure == 0
}

func (w *worker[In, Out]) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

func (w *worker[In, Out]) setPause(reason uint8, on bool) {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	if w.abandoned {
		return
	}
	old := w.paused
	if on {
		w.paused |= reason
	} else {
		w.paused &^= reason
	}
	parts := map[string][]int32{w.tp.topic: {w.tp.partition}}
	switch {
	case old == 0 && w.paused != 0:
		w.r.cl.PauseFetchPartitions(parts)
		w.r.m.paused.Inc()
	case old != 0 && w.paused == 0:
		w.r.cl.ResumeFetchPartitions(parts)
		w.r.m.paused.Dec()
	}
}

// abandon gives up on a worker that did not return after its cancel: it
// will never mark an offset, its partition's fetches are resumed now and
// never paused by it again (the partition may come back to this member with
// a new worker), and its open window's keys no longer count against
// WindowConfig.MaxTotalKeys.
func (w *worker[In, Out]) abandon() {
	w.lost.Store(true)
	w.pmu.Lock()
	defer w.pmu.Unlock()
	w.releaseFetchesLocked()
	if w.win != nil {
		w.win.release()
	}
}

// releaseFetchesLocked, with pmu held, resumes the partition's fetches if
// the worker paused them and marks the worker as no longer touching them
// (abandoned): setPause does nothing from then on.
func (w *worker[In, Out]) releaseFetchesLocked() {
	w.abandoned = true
	if w.paused != 0 {
		w.paused = 0
		w.r.cl.ResumeFetchPartitions(map[string][]int32{w.tp.topic: {w.tp.partition}})
		w.r.m.paused.Dec()
	}
}

func (w *worker[In, Out]) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return w.ctx.Err() != nil
	}
}

// take waits for records and returns the next batch, or nil when the worker
// must stop.
func (w *worker[In, Out]) take() []*kgo.Record {
	cfg := &w.r.cfg
	for w.queued() == 0 {
		select {
		case <-w.wake:
		case <-w.stopping:
			return nil
		case <-w.ctx.Done():
			return nil
		}
	}
	if w.isStopping() {
		return nil
	}
	if w.queued() < cfg.BatchMaxRecords {
		linger := time.NewTimer(cfg.BatchLinger)
	fill:
		for {
			select {
			case <-w.wake:
				if w.queued() >= cfg.BatchMaxRecords {
					break fill
				}
			case <-linger.C:
				break fill
			case <-w.stopping:
				break fill
			case <-w.ctx.Done():
				break fill
			}
		}
		linger.Stop()
	}
	w.mu.Lock()
	n, bytes := 0, 0
	for n < len(w.queue) && n < cfg.BatchMaxRecords {
		bytes += len(w.queue[n].Value)
		if n > 0 && bytes > cfg.BatchMaxBytes {
			break
		}
		n++
	}
	batch := make([]*kgo.Record, n)
	copy(batch, w.queue[:n])
	rest := copy(w.queue, w.queue[n:])
	clear(w.queue[rest:])
	w.queue = w.queue[:rest]
	left := rest
	w.mu.Unlock()
	if left <= cfg.MaxInFlight/2 {
		w.setPause(pauseBackpressure, false)
	}
	select {
	case w.r.drained <- struct{}{}:
	default:
	}
	return batch
}

// exit releases what the worker holds when its loop returns: its
// partition's fetches are resumed, and a later setPause (the poll loop's
// backpressure may still hold the worker in a list it took before the
// worker was detached) no longer pauses them. Without that, a partition
// revoked while its worker was full stayed paused in the client for good,
// and was never fetched again if it came back to this member.
func (w *worker[In, Out]) exit() {
	w.pmu.Lock()
	w.releaseFetchesLocked()
	w.pmu.Unlock()
	if w.win != nil {
		w.win.reset() // an abandoned window's keys no longer count
	}
	w.r.m.assigned.Dec()
	close(w.done)
}

func (w *worker[In, Out]) loop() {
	defer w.exit()
	for {
		batch := w.take()
		if batch == nil {
			if w.win != nil && w.ctx.Err() == nil {
				if err := w.closeWindow(); err != nil && !errors.Is(err, errAbandoned) {
					w.r.fail(err)
				}
			}
			return
		}
		handle := w.handle
		if w.win != nil {
			handle = w.handleWindowed
		}
		if err := handle(batch); err != nil {
			if !errors.Is(err, errAbandoned) {
				w.r.fail(err)
			}
			return
		}
	}
}

// sleep waits d with the partition's fetches paused. It returns false when
// the worker must stop instead.
func (w *worker[In, Out]) sleep(d time.Duration) bool {
	w.setPause(pauseRetry, true)
	defer w.setPause(pauseRetry, false)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.stopping:
		return false
	case <-w.ctx.Done():
		return false
	}
}

// pending accumulates the effects of a batch until they are flushed.
type pending[Out any] struct {
	outs   []Out
	owners []int // owners[i] is the batch index of the record that produced outs[i]
	dlq    []*kgo.Record
	labels [][2]string // reason and rule of dlq[i], for the metrics
	dlqIdx map[int]bool
}

// handle processes a batch. Records before a stop or a fatal error are still
// flushed and committed; the rest is left for redelivery.
func (w *worker[In, Out]) handle(batch []*kgo.Record) error {
	p, done, stopErr := w.process(batch)
	if done > 0 {
		if err := w.flush(batch[:done], p); err != nil {
			return err
		}
	}
	return stopErr
}

// process runs decode and the stage for the records of batch in order. It
// returns their outputs and dead letters, how many records were handled
// (all unless a fatal error or an abandon stopped it) and that error.
func (w *worker[In, Out]) process(batch []*kgo.Record) (p *pending[Out], done int, stopErr error) {
	r := w.r
	r.m.batchSize.Observe(float64(len(batch)))
	r.m.in.WithLabelValues(w.tp.topic).Add(float64(len(batch)))
	p = &pending[Out]{}
	done = len(batch)
	start := time.Now()
	for i, rec := range batch {
		outs, dl, err := w.processOne(rec)
		if err != nil {
			done, stopErr = i, err
			break
		}
		if dl.rec != nil {
			p.addDLQ(i, dl)
			continue
		}
		for _, o := range outs {
			p.outs = append(p.outs, o)
			p.owners = append(p.owners, i)
		}
	}
	r.m.batchDur.WithLabelValues("process").Observe(time.Since(start).Seconds())
	return p, done, stopErr
}

// addDLQ queues the dead letter d of batch record i, once per record.
func (p *pending[Out]) addDLQ(i int, d deadLetter) {
	if p.dlqIdx == nil {
		p.dlqIdx = map[int]bool{}
	}
	if p.dlqIdx[i] {
		return
	}
	p.dlqIdx[i] = true
	p.dlq = append(p.dlq, d.rec)
	p.labels = append(p.labels, [2]string{string(d.reason), d.rule})
}

// deadLetter is a DLQ record with the reason and rule it carries.
type deadLetter struct {
	rec    *kgo.Record
	reason stages.Reason
	rule   string
}

// processOne decodes and runs the stage for one record, with retries. It
// returns the outputs, or a dead letter (rec set), or an error (errAbandoned
// or fatal).
func (w *worker[In, Out]) processOne(rec *kgo.Record) ([]Out, deadLetter, error) {
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
	}}
	if len(rec.Headers) > 0 {
		msg.Headers = make([]stages.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			msg.Headers[i] = stages.Header{Key: h.Key, Value: h.Value}
		}
	}
	for attempt := 1; ; attempt++ {
		t0 := time.Now()
		outs, err := w.callStage(msg)
		r.m.stageDur.Observe(time.Since(t0).Seconds())
		if err == nil {
			r.m.out.Add(float64(len(outs)))
			return outs, deadLetter{}, nil
		}
		// A cancelled worker, or a stage that gave up its record because
		// the worker is stopping (stages.ErrStopped): the record is left
		// for redelivery, neither retried nor dead-lettered.
		if w.ctx.Err() != nil || (errors.Is(err, stages.ErrStopped) && w.isStopping()) {
			return nil, deadLetter{}, errAbandoned
		}
		c := stages.Classify(err)
		switch c.Kind {
		case stages.KindDeadLetter:
			return nil, w.dlqRecord(rec, c, attempt, r.o.stageName), nil
		case stages.KindFatal:
			return nil, deadLetter{}, fmt.Errorf("stage %s at %s/%d@%d: %w", r.o.stageName, rec.Topic, rec.Partition, rec.Offset, err)
		}
		if attempt >= r.cfg.Retry.MaxAttempts {
			ex := &stages.Error{Kind: stages.KindDeadLetter, Reason: stages.ReasonRetriesExhausted, Rule: c.Rule, Err: c.Err}
			return nil, w.dlqRecord(rec, ex, attempt, r.o.stageName), nil
		}
		r.m.retries.WithLabelValues("stage").Inc()
		wait := retryWait(r.cfg.Retry, attempt, c.After)
		r.o.log.Debug("stage retry", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "attempt", attempt, "wait", wait, "err", err)
		if !w.sleep(wait) {
			return nil, deadLetter{}, errAbandoned
		}
	}
}

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
// DLQ topic even as a stub), which are returned.
func (w *worker[In, Out]) write(outs []Out, rejected func(rej *stages.Rejections, attempt int) error) error {
	r := w.r
	t0 := time.Now()
	for attempt := 1; ; attempt++ {
		ts := time.Now()
		err := r.sink.Write(w.ctx, outs)
		r.m.sinkDur.Observe(time.Since(ts).Seconds())
		if err == nil {
			break
		}
		var rej *stages.Rejections
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
	return nil
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

// sinkRejection returns the dead-letter classification of one item a sink
// rejected (the Rule and Err of a [stages.Rejection]). When err is itself a
// dead letter ([stages.Classify] reports KindDeadLetter: a sink passing on
// a caller's [stages.DeadLetter], as kafkasink does for its mapping
// function), its rule is dlq.rule when rule is empty, and its reason is
// dlq.reason when that is one of the design's (knownReason; sink_rejected
// otherwise, so that dlq.reason keeps the design's vocabulary). Any other
// rejection is sink_rejected with rule. Err is err either way, so
// dlq.error keeps the sink's message.
func sinkRejection(rule string, err error) *stages.Error {
	c := &stages.Error{Kind: stages.KindDeadLetter, Reason: stages.ReasonSinkRejected, Rule: rule, Err: err}
	if d := stages.Classify(err); d != nil && d.Kind == stages.KindDeadLetter {
		if knownReason(d.Reason) {
			c.Reason = d.Reason
		}
		if c.Rule == "" {
			c.Rule = d.Rule
		}
	}
	return c
}

// knownReason reports whether reason is one of the dlq.reason values fixed
// by the design (DESIGN §3).
func knownReason(reason stages.Reason) bool { return slices.Contains(designReasons(), reason) }

// designReasons returns the dlq.reason values fixed by the design (DESIGN
// §3), in a new slice.
func designReasons() []stages.Reason {
	return []stages.Reason{stages.ReasonSanityFail, stages.ReasonDecodeError, stages.ReasonUnknownTaskType,
		stages.ReasonSinkRejected, stages.ReasonRetriesExhausted, stages.ReasonException}
}

// errInvalidRejection reports a sink that rejected an index outside the
// batch it was given.
var errInvalidRejection = errors.New("sink rejected an item outside its batch")

// flush writes the batch's outputs, dead-letters rejected and failed records,
// and marks the batch's offsets for commit — in that order, each step durable
// before the next.
func (w *worker[In, Out]) flush(batch []*kgo.Record, p *pending[Out]) error {
	r := w.r
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
	if w.lost.Load() {
		return errAbandoned
	}
	last := batch[len(batch)-1]
	r.cl.MarkCommitOffsets(map[string]map[int32]kgo.EpochOffset{
		last.Topic: {last.Partition: {Epoch: last.LeaderEpoch, Offset: last.Offset + 1}},
	})
	r.m.committed.WithLabelValues(last.Topic).Add(float64(len(batch)))
	return nil
}

// dlqRecord builds the dead letter of rec: original key, value and
// non-DLQ headers, plus the DLQ headers of DESIGN §3. A redrive count header
// from an earlier redrive is kept for the redrive loop guard.
func (w *worker[In, Out]) dlqRecord(rec *kgo.Record, c *stages.Error, attempts int, stage string) deadLetter {
	own := make([]stages.Header, len(rec.Headers))
	for i, h := range rec.Headers {
		own[i] = stages.Header{Key: h.Key, Value: h.Value}
	}
	msg := ""
	if c.Err != nil {
		msg = c.Err.Error()
	}
	hs := DLQHeaders(own, DeadLetter{
		Reason: c.Reason, Rule: c.Rule, Error: msg, Stage: stage,
		Source:   stages.Source{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp},
		Attempts: attempts, FailedAt: time.Now(),
	})
	return deadLetter{rec: &kgo.Record{Topic: w.r.cfg.DLQTopic, Key: rec.Key, Value: rec.Value, Headers: hs}, reason: c.Reason, rule: c.Rule}
}

// maxDLQError bounds the dlq.error header: an error message that quotes its
// input (a huge field, say) must not make the dead letter too large for the
// DLQ topic.
const maxDLQError = 4 << 10

// truncateError cuts msg to at most maxDLQError bytes (see truncate).
func truncateError(msg string) string { return truncate(msg, maxDLQError) }

// truncate cuts msg to at most limit bytes (limit > 64), on a UTF-8
// boundary, saying how much was cut.
func truncate(msg string, limit int) string {
	if len(msg) <= limit {
		return msg
	}
	cut := limit - 64
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d more bytes cut)", msg[:cut], len(msg)-cut)
}

// omitValue returns the stub of a dead letter the DLQ topic refused as too
// large (see stages.HeaderValueOmitted): its dlq.* headers without the
// source record's value and headers, and without its key when that is
// larger than maxStubKey.
func omitValue(rec *kgo.Record, cause error) *kgo.Record {
	stub := &kgo.Record{Topic: rec.Topic, Key: rec.Key}
	omitted := fmt.Sprintf("value of %d bytes", len(rec.Value))
	if len(rec.Key) > maxStubKey {
		stub.Key = nil
		omitted = fmt.Sprintf("key of %d bytes, %s", len(rec.Key), omitted)
	}
	n := 0
	for _, h := range rec.Headers {
		if h.Key == stages.HeaderError {
			h.Value = []byte(truncate(string(h.Value), maxStubError))
		}
		if strings.HasPrefix(h.Key, "dlq.") {
			stub.Headers = append(stub.Headers, h)
		} else {
			n++
		}
	}
	if n > 0 {
		omitted = fmt.Sprintf("%s, %d source header(s)", omitted, n)
	}
	omitted += " (the DLQ topic refused the record: " + truncate(cause.Error(), maxStubError) + ")"
	stub.Headers = append(stub.Headers, kgo.RecordHeader{Key: stages.HeaderValueOmitted, Value: []byte(omitted)})
	return stub
}

// maxStubKey is the largest key a stub dead letter keeps; maxStubError
// bounds the error texts it carries.
const (
	maxStubKey   = 1 << 10
	maxStubError = 512
)

// tooLarge reports whether a produce error says the record can never fit.
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}
