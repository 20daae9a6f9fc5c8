package run

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

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
	qbytes int64         // recordBytes of queue, guarded by mu
	wake   chan struct{} // cap 1: records were pushed
	paused uint8         // pause reasons, guarded by pmu
	pmu    sync.Mutex    // taken after mu when both are held (pauseIfFull)
	// sleepers (guarded by pmu) counts the calls of sleep under way; the
	// partition is paused for retries while it is above 0.
	sleepers int
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
	// pos is the partition's position for the lag gauge: the offset after
	// the last batch marked done, or the first record pushed before that;
	// -1 before the first push (see Runner.watchLag).
	pos atomic.Int64

	win  *window[Out] // open coalescing window; nil when windows are off
	pend pending[Out] // the effects of the batch being processed into win (see process)
	rec  recordHold   // memory budget: bytes of the records pushed and not yet processed

	// State stores and timers (state.go, timer.go, fence.go).
	st        *partitionState // the partition's stores; nil without stores and timers
	ts        timerState
	unflushed unflushedState // batches whose state writes wait for the next flush (statecoalesce.go)
	gen       int32          // group generation at which the partition was assigned
	epoch     atomic.Int32   // fencing epoch, known after the restore
	restoring atomic.Bool    // counted in stateRuntime.restoring

	// Dead letters with Config.DLQCommit DLQTransactional (dlqtxn.go).
	owner *txnOwner
	held  heldDLQ // dead letters and published records not yet handed to the committer

	blocked atomic.Int32 // what the worker is waiting for (blockedSink…), for the abandon log

	// WithOffsetStore (offsetstore.go): the partition's claim, and the
	// position of the batch being written (nil: none).
	claim claimed
	wpos  *stages.Position
}

// heldDLQ holds a worker's dead letters, packed (see heldDLQ.hold), and
// its sink's published records (see [Publisher]) until the offset after
// them is handed to the committer (see worker.markDone).
type heldDLQ struct {
	dlq    [][]byte      // blocks of packed dead letters (appendPacked), compressed (hold)
	labels [][2]string   // reason and rule of each held dead letter, in order
	events []*kgo.Record // a Publisher sink's records
	bytes  int64         // of dlq and events, counted in the memory budget's records

	scratch, encBuf []byte // hold's buffers, kept between batches
}

// What a worker waits for (worker.blocked).
const (
	blockedNone int32 = iota
	blockedStage
	blockedSink
	blockedDLQ
	blockedChangelog
	blockedCommit
)

// doing records that the worker now waits for what (blockedSink…) and
// returns the function restoring the previous value.
func (w *worker[In, Out]) doing(what int32) func() {
	prev := w.blocked.Swap(what)
	return func() { w.blocked.Store(prev) }
}

// blocker names, for the abandon log, what a worker that did not return
// waits for.
func (w *worker[In, Out]) blocker() string {
	switch w.blocked.Load() {
	case blockedStage:
		return "the stage, which ignores its context"
	case blockedSink:
		return "the sink's Write, which ignores its context"
	case blockedDLQ:
		return "the runtime's own DLQ produce (is the Kafka cluster reachable?)"
	case blockedChangelog:
		return "the runtime's own state changelog produce (is the Kafka cluster reachable?)"
	case blockedCommit:
		return "the runtime's dead-letter commit, which holds its dead letters until a transaction commits them (is the Kafka cluster reachable?)"
	}
	return "the stage or the sink, which ignores its context"
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
	w.pos.Store(-1)
	w.sctx = stages.WithStopping(ctx, w.stopping)
	w.owner = &txnOwner{tp: k}
	if r.merger != nil {
		w.win = newWindow(r.merger, &r.m.windowKeys, r.mem)
		w.win.pool = &r.chunks
	}
	// State stores and timers: the stage's context carries the partition's
	// stores and ownership; the restore is pending until the loop ran it.
	w.gen = r.gen.Load()
	w.epoch.Store(w.gen)
	w.sctx = context.WithValue(w.sctx, ownerKey{}, ownerOf(w))
	if r.state != nil {
		w.st = newPartitionState(r.state.stores, k, r.state.timers, w.produceChangelog)
		w.sctx = context.WithValue(w.sctx, stateKey{}, w.st)
		if len(w.st.stores) > 0 {
			w.restoring.Store(true)
			r.state.restoring.Add(1)
			for _, s := range w.st.stores {
				r.state.m.restoring.WithLabelValues(s.name()).Inc()
			}
		}
	}
	return w
}

// ownership implements ownerOf (see Owner).
func (w *worker[In, Out]) ownership() Ownership {
	return Ownership{Topic: w.tp.topic, Partition: w.tp.partition, Generation: w.gen, Epoch: w.epoch.Load()}
}

// push appends fetched records and records the partition's high watermark;
// it never blocks. The poll loop bounds the queue (see
// Runner.waitForCapacity).
func (w *worker[In, Out]) push(recs []*kgo.Record, hwm int64) {
	w.hwm.Store(hwm)
	n := recordsBytes(recs)
	if len(recs) > 0 {
		w.pos.CompareAndSwap(-1, recs[0].Offset)
	}
	w.holdRecords(n) // memory budget
	w.mu.Lock()
	w.queue = append(w.queue, recs...)
	w.qbytes += n
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// full reports whether the queue is at MaxInFlight, or its records hold
// share bytes (see Runner.partitionShare), and the partition is not already
// paused for backpressure.
func (w *worker[In, Out]) full(share int64) bool {
	if n, bytes := w.queueSize(); !w.atFullMark(n, bytes, share) {
		return false
	}
	w.pmu.Lock()
	defer w.pmu.Unlock()
	return w.paused&pauseBackpressure == 0
}

// hungry reports whether a poll would feed the worker: its partition has
// records beyond those pushed (w.next below the high watermark of the last
// fetch), its queue is below the marks at which a paused partition resumes
// (half of MaxInFlight and of share), and its fetches are not paused. Used
// by the poll loop only (it owns w.next).
func (w *worker[In, Out]) hungry(share int64) bool {
	if w.next < 0 || w.next >= w.hwm.Load() {
		return false
	}
	if n, bytes := w.queueSize(); !w.atResumeMark(n, bytes, share) {
		return false
	}
	w.pmu.Lock()
	defer w.pmu.Unlock()
	return w.paused == 0
}

// atFullMark reports whether a queue of n records holding bytes is full:
// at MaxInFlight records, or at share bytes (backpressure pauses it).
func (w *worker[In, Out]) atFullMark(n int, bytes, share int64) bool {
	return n >= w.r.cfg.MaxInFlight || bytes >= share
}

// atResumeMark reports whether a queue of n records holding bytes drained
// to half of MaxInFlight and of share (a backpressure pause is lifted).
func (w *worker[In, Out]) atResumeMark(n int, bytes, share int64) bool {
	return n <= w.r.cfg.MaxInFlight/2 && bytes <= share/2
}

func (w *worker[In, Out]) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

func (w *worker[In, Out]) setPause(reason uint8, on bool) {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	w.setPauseLocked(reason, on)
}

// retrySleep counts a sleeper of the partition (see sleep): its fetches are
// paused for retries while there is one. Several sleep at once when
// Config.KeyConcurrency runs records concurrently.
func (w *worker[In, Out]) retrySleep(start bool) {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	if start {
		w.sleepers++
	} else {
		w.sleepers--
	}
	w.setPauseLocked(pauseRetry, w.sleepers > 0)
}

// setPauseLocked is setPause with pmu held.
func (w *worker[In, Out]) setPauseLocked(reason uint8, on bool) {
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
	w.owner.gone.Store(true)
	if w.st != nil {
		w.st.close() // its stage's later writes fail
	}
	w.pmu.Lock()
	defer w.pmu.Unlock()
	w.releaseFetchesLocked()
	if w.win != nil {
		w.win.release()
	}
	w.rec.releaseAll(w.r.mem) // memory budget
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
		timer, stopTimer := w.timerWait() // a due timer ends the wait (timer.go)
		select {
		case <-w.wake:
		case <-timer:
			stopTimer()
			if w.isStopping() {
				return nil
			}
			return noRecords
		case <-w.stopping:
			stopTimer()
			return nil
		case <-w.ctx.Done():
			stopTimer()
			return nil
		}
		stopTimer()
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
	return w.dequeue(cfg.BatchMaxRecords, min(cfg.BatchMaxBytes, w.r.batchBytes()), true) // memory budget
}

// takeNow returns at most maxRecords queued records holding at most
// maxBytes of values, without waiting (a batch growing, see processByKey).
func (w *worker[In, Out]) takeNow(maxRecords, maxBytes int) []*kgo.Record {
	if maxRecords <= 0 || maxBytes <= 0 {
		return nil
	}
	return w.dequeue(maxRecords, maxBytes, false)
}

// dequeue removes up to maxRecords records from the queue, their values at
// most maxBytes (the first record regardless when first is set), resumes
// the partition's fetches once the queue drained below half its bounds,
// and returns the records.
func (w *worker[In, Out]) dequeue(maxRecords, maxBytes int, first bool) []*kgo.Record {
	w.mu.Lock()
	n, bytes, qb := 0, 0, int64(0)
	for n < len(w.queue) && n < maxRecords {
		bytes += len(w.queue[n].Value)
		if (n > 0 || !first) && bytes > maxBytes {
			break
		}
		qb += recordBytes(w.queue[n])
		n++
	}
	w.qbytes -= qb
	leftBytes := w.qbytes
	batch := make([]*kgo.Record, n)
	copy(batch, w.queue[:n])
	rest := copy(w.queue, w.queue[n:])
	clear(w.queue[rest:])
	w.queue = w.queue[:rest]
	left := rest
	w.mu.Unlock()
	if w.atResumeMark(left, leftBytes, w.r.partShare.Load()) {
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
	w.rec.releaseAll(w.r.mem) // memory budget: the queue left is redelivered to the next owner
	if w.st != nil {
		w.st.close()
		if w.restoring.Load() {
			w.restored()
		}
	}
	w.r.m.assigned.Dec()
	close(w.done)
}

func (w *worker[In, Out]) loop() {
	defer w.exit()
	if w.st != nil { // state stores: restored before the first record; timers start after
		if err := w.restoreState(); err != nil {
			if !errors.Is(err, errAbandoned) {
				w.r.fail(err)
			}
			return
		}
		if w.r.timer.every > 0 {
			w.ts.next = time.Now().Add(w.r.timer.every)
		}
	}
	for {
		batch := w.take()
		if batch == nil {
			if w.unflushed.pending && w.ctx.Err() == nil && !w.lost.Load() {
				// A clean stop: flush what waited (statecoalesce.go).
				if err := w.flushUnflushed(); err != nil && !errors.Is(err, errAbandoned) {
					w.r.fail(err)
				}
			}
			if w.win != nil && w.ctx.Err() == nil {
				if err := w.closeWindow(); err != nil && !errors.Is(err, errAbandoned) {
					w.r.fail(err)
				}
			}
			return
		}
		handle := w.handle
		if w.win != nil {
			handle = w.handleWindowed // releases the batch's records itself, before it decides to close
		}
		err := error(nil)
		if len(batch) > 0 {
			err = handle(batch)
			if w.win == nil {
				w.releaseRecords(recordsBytes(batch)) // memory budget: the batch is done
			}
		}
		if err == nil {
			err = w.fireTimers() // timers due now, between batches (timer.go)
		}
		if err != nil {
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
	w.retrySleep(true)
	defer w.retrySleep(false)
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
