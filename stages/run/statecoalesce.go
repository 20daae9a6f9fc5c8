package run

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// WithStateFlushEvery coalesces the changelog writes of a runner's state
// stores over up to every (0, the default: one flush per batch and per
// timer firing). A batch whose records produced neither outputs nor dead
// letters, and a timer firing without outputs, then leave their state
// writes in the stores (and the batch its offsets unmarked); the next
// flush — the first batch or firing with outputs or dead letters, the
// first batch or wake-up once every has passed since the first write that
// waits, or the worker's clean stop — produces one changelog record per
// key written since the last flush (its latest value) and only then marks
// the offsets of every batch it covers. N writes of a key within every are
// thus one changelog record, as Kafka Streams' record cache makes one per
// commit interval.
//
// Contract: a committed offset's state is in the changelog, and state is
// never ahead of the outputs it stands for, as without it. A crash (kill
// -9) or a lost partition loses the unflushed writes together with their
// unmarked offsets: the next owner restores the last flushed state and
// processes those records again (and fires again a keyed timer whose
// clearing was not flushed), so a stage must be idempotent with respect to
// its state exactly as without coalescing. It does not apply to coalescing
// windows (Config.Window), which flush every window.
func WithStateFlushEvery(every time.Duration) Option {
	return func(o *options) { o.stateEvery = every }
}

// checkStateFlush refuses WithStateFlushEvery with Config.KeyConcurrency
// above 1: a deferred batch marks its last record's offset, which a batch
// run by key may not have reached.
func checkStateFlush(cfg Config, o options) error {
	if o.stateEvery > 0 && cfg.KeyConcurrency > 1 {
		return fmt.Errorf("pipeline %s: WithStateFlushEvery does not support Config.KeyConcurrency above 1", cfg.Name)
	}
	return nil
}

// unflushedState is the batches of a worker whose state writes and
// offsets wait for the next flush.
type unflushedState struct {
	pending bool        // writes wait for the next flush
	last    *kgo.Record // the last record of the last batch that waits; nil: none
	records int         // data records of the batches that wait
	due     time.Time   // when they must be flushed at the latest
}

// take forgets the unflushed batches (their state is being flushed) and
// returns their record count.
func (u *unflushedState) take() int {
	n := u.records
	*u = unflushedState{}
	return n
}

// deferState reports whether the changelog records and offsets of batch,
// whose effects are p, wait for a later flush (see WithStateFlushEvery).
func (w *worker[In, Out]) deferState(batch []*kgo.Record, p *pending[Out]) bool {
	if len(p.outs) > 0 || len(p.dlq) > 0 || !w.deferWrites(time.Now()) {
		return false
	}
	w.unflushed.last = batch[len(batch)-1]
	w.unflushed.records += dataRecords(batch)
	return true
}

// deferWrites reports whether state writes made now, without outputs, wait
// for a later flush, and records that they do.
func (w *worker[In, Out]) deferWrites(now time.Time) bool {
	every := w.r.o.stateEvery
	if every <= 0 || w.st == nil || len(w.st.stores) == 0 || w.win != nil {
		return false
	}
	if !w.unflushed.pending {
		w.unflushed.pending, w.unflushed.due = true, now.Add(every)
	} else if !now.Before(w.unflushed.due) {
		return false
	}
	return true
}

// flushUnflushed flushes the stores and marks the offsets of the batches
// that waited for it, if any.
func (w *worker[In, Out]) flushUnflushed() error {
	if err := w.flushState(); err != nil {
		return err
	}
	if w.unflushed.last == nil {
		w.unflushed = unflushedState{}
		return nil
	}
	if w.lost.Load() {
		return errAbandoned
	}
	last := w.unflushed.last
	return w.markDone(last, w.unflushed.take())
}

// unflushedDue returns when the unflushed batches must be flushed, if any.
func (w *worker[In, Out]) unflushedDue() (time.Time, bool) {
	return w.unflushed.due, w.unflushed.pending
}
