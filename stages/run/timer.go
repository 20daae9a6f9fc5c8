package run

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// Firing is one timer firing, as the runner's timer function sees it.
type Firing struct {
	// Store and Key name the entry of a keyed timer (see
	// [Partition.SetTimer]); both are empty for the periodic punctuation.
	Store string
	Key   string
	// Due is when the timer was due; a firing happens at or after it.
	Due time.Time
	// Attempt is 1 for the first call of a firing, and counts the calls
	// of a firing retried after an error.
	Attempt int
}

func (f Firing) String() string {
	if f.Key == "" && f.Store == "" {
		return "periodic"
	}
	return f.Store + "/" + f.Key
}

// TimerFunc handles a timer firing of one partition: it returns outputs
// for the sink, and may read and write the partition's stores through
// ctx (see [Store.Of]), like a stage handling a record.
type TimerFunc[Out any] func(ctx context.Context, f Firing) ([]Out, error)

type timerSpec[Out any] struct {
	every time.Duration
	fn    TimerFunc[Out]
}

// WithTimers sets the runner's timer function, called by the worker of a
// partition for its periodic punctuation (every: 0 turns it off) and for
// the keyed one-shot timers its stages set on store entries (see
// [Partition.SetTimer]). Out must be the runner's output type.
//
// Contract:
//   - A partition's timers run on its worker, between batches: never
//     concurrently with one of its batches or with each other, and only on
//     the member that owns the partition (after its stores are restored).
//     They fire at or after their due time (wall clock); a busy partition
//     fires them after its current batch, at most Config.BatchMaxRecords
//     firings at a time. The punctuation is due every `every`, the first
//     time `every` after the partition's restore; a punctuation missed
//     while the worker was busy fires once.
//   - A firing commits like a record: its outputs are written by the sink
//     (after the open coalescing window, if any, was written), then the
//     changelog records of its state writes, the keyed timer's clearing
//     included, are produced and acknowledged. A crash before that fires
//     the timer again on the next owner; a firing is at-least-once, so
//     its effects must be idempotent or guarded by state (an entry that
//     records the firing, written with its outputs).
//   - Errors: a retry error fires it again after Config.Retry's backoff
//     (a keyed timer is re-armed; the punctuation's next firing is moved
//     up), up to Config.Retry.MaxAttempts calls, then the firing is
//     dropped and logged; a wait ([stages.Wait], a rate-limit denial)
//     fires it again after the wait (bounded like a stage's: at least
//     10ms, at most 5 minutes) at the same Attempt, as often as it is
//     returned, and is never dropped; a dead-letter error or a panic drops it at once
//     (there is no record to dead-letter); a fatal error stops the runner.
//     Writes made before the error are kept. Outputs of a firing the sink
//     rejects are dropped and counted (sluice_timer_outputs_rejected_total).
//   - sluice_timer_firings_total{timer,result} counts firings per store
//     (keyed) or "periodic", and result: ok, retry (a retry error, fired
//     again), wait (a wait, fired again; not in retry) or dropped.
func WithTimers[Out any](every time.Duration, fn TimerFunc[Out]) Option {
	return func(o *options) { o.timers = timerSpec[Out]{every: every, fn: fn} }
}

// timersOf returns the timer function of the options, checking its output
// type against the runner's.
func timersOf[Out any](name string, o options) (timerSpec[Out], error) {
	if o.timers == nil {
		return timerSpec[Out]{}, nil
	}
	spec, ok := o.timers.(timerSpec[Out])
	if !ok || spec.fn == nil {
		var zero Out
		return timerSpec[Out]{}, fmt.Errorf("pipeline %s: run.WithTimers needs a non-nil TimerFunc returning the runner's outputs (%T)", name, zero)
	}
	if spec.every < 0 {
		return timerSpec[Out]{}, fmt.Errorf("pipeline %s: timer period %v is negative", name, spec.every)
	}
	return spec, nil
}

// timerState is a partition's timer bookkeeping, kept by its worker.
type timerState struct {
	next  time.Time // the punctuation's next due time (zero: none)
	tries int       // failed calls of the punctuation's pending firing (a keyed timer's are in its entry)
}

// timerWait returns a channel that fires when the worker's next timer is
// due (nil when it has none) and a function to release it.
func (w *worker[In, Out]) timerWait() (<-chan time.Time, func()) {
	at, ok := w.nextTimer()
	if !ok {
		return nil, func() {}
	}
	t := time.NewTimer(time.Until(at))
	return t.C, func() { t.Stop() }
}

// nextTimer returns the due time of the worker's earliest timer.
func (w *worker[In, Out]) nextTimer() (time.Time, bool) {
	if w.st == nil {
		return time.Time{}, false
	}
	at, ok := w.unflushedDue() // WithStateFlushEvery's deadline (statecoalesce.go)
	if w.r.timer.fn == nil {
		return at, ok
	}
	if !w.ts.next.IsZero() && (!ok || w.ts.next.Before(at)) {
		at, ok = w.ts.next, true
	}
	for _, s := range w.st.stores {
		if ms, has := s.nextTimer(); has {
			if t := time.UnixMilli(ms); !ok || t.Before(at) {
				at, ok = t, true
			}
		}
	}
	return at, ok
}

// fireTimers runs the timers due now (see WithTimers) and makes their
// effects durable: sink write, then the changelog.
func (w *worker[In, Out]) fireTimers() error {
	r := w.r
	if w.st == nil {
		return nil
	}
	now := time.Now()
	if due, ok := w.unflushedDue(); ok && !now.Before(due) {
		if err := w.flushUnflushed(); err != nil {
			return err
		}
	}
	if r.timer.fn == nil {
		return nil
	}
	var fs []Firing
	if !w.ts.next.IsZero() && !now.Before(w.ts.next) {
		fs = append(fs, Firing{Due: w.ts.next, Attempt: w.ts.tries + 1})
		w.ts.next = w.ts.next.Add(r.timer.every)
		if w.ts.next.Before(now) {
			w.ts.next = now.Add(r.timer.every)
		}
	}
	for _, s := range w.st.stores {
		for _, it := range s.due(now.UnixMilli(), r.cfg.BatchMaxRecords-len(fs)) {
			fs = append(fs, Firing{Store: s.name(), Key: it.key, Due: time.UnixMilli(it.at), Attempt: it.tries + 1})
		}
	}
	if len(fs) == 0 {
		return nil
	}
	if w.win != nil {
		if err := w.closeWindow(); err != nil {
			return err
		}
	}
	var outs []Out
	for _, f := range fs {
		label := f.Store
		if label == "" {
			label = "periodic"
		}
		o, err := w.callTimer(f)
		if err == nil {
			w.refire(f, time.Time{}, 0)
			r.state.m.firings.WithLabelValues(label, "ok").Inc()
			outs = append(outs, o...)
			continue
		}
		if w.ctx.Err() != nil || (errors.Is(err, stages.ErrStopped) && w.isStopping()) {
			return errAbandoned
		}
		c := stages.Classify(err)
		switch {
		case c.Kind == stages.KindFatal:
			return fmt.Errorf("timer %s of %s/%d: %w", f, w.tp.topic, w.tp.partition, err)
		case c.Kind == stages.KindWait:
			// A rate-limit denial: fire again after the wait, at the same
			// attempt (a record's Wait never spends an attempt either).
			wait := waitBounds(c.After)
			r.state.m.firings.WithLabelValues(label, "wait").Inc()
			w.refire(f, now.Add(wait), f.Attempt-1)
			r.o.log.Debug("timer wait", "timer", f.String(), "partition", w.tp.partition, "attempt", f.Attempt, "wait", wait, "err", c.Err)
		case c.Kind == stages.KindRetry && f.Attempt < r.cfg.Retry.MaxAttempts:
			r.state.m.firings.WithLabelValues(label, "retry").Inc()
			wait := retryWait(r.cfg.Retry, f.Attempt, c.After)
			w.refire(f, now.Add(wait), f.Attempt)
			r.o.log.Warn("timer failed, retrying", "timer", f.String(), "partition", w.tp.partition, "attempt", f.Attempt, "wait", wait, "err", err)
		default:
			w.refire(f, time.Time{}, 0)
			r.state.m.firings.WithLabelValues(label, "dropped").Inc()
			r.o.log.Error("timer failed, firing dropped", "timer", f.String(), "partition", w.tp.partition, "attempt", f.Attempt, "err", err)
		}
	}
	if len(outs) > 0 {
		err := w.write(outs, func(rej *stages.Rejections, _ int) error {
			r.state.m.timerRejected.Add(float64(len(rej.Items)))
			for _, it := range rej.Items {
				r.o.log.Error("sink rejected a timer output; dropped (a firing has no source record to dead-letter)",
					"partition", w.tp.partition, "index", it.Index, "rule", it.Rule, "err", it.Err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(outs) == 0 && w.deferWrites(now) {
		return nil // the firing's state writes wait for the next flush (statecoalesce.go)
	}
	return w.flushUnflushed() // the firing's state, and any batches' that waited
}

// refire fires f again at, after tries failed calls: a keyed timer is
// re-armed (unless the timer function set it meanwhile), the punctuation's
// next firing is moved to at. A zero at ends the firing (ok or dropped):
// its count is reset and nothing is re-armed.
func (w *worker[In, Out]) refire(f Firing, at time.Time, tries int) {
	if f.Key == "" && f.Store == "" {
		w.ts.tries = tries
		if !at.IsZero() {
			w.ts.next = at
		}
		return
	}
	if !at.IsZero() {
		w.st.byName(f.Store).rearm(f.Key, at.UnixMilli(), tries)
	}
}

// callTimer runs the timer function; a panic is an error that drops the
// firing, as a stage panic dead-letters its record.
func (w *worker[In, Out]) callTimer(f Firing) (outs []Out, err error) {
	defer func() {
		if p := recover(); p != nil {
			outs, err = nil, stages.DeadLetter(stages.ReasonException, "", fmt.Errorf("timer panic: %v", p))
		}
	}()
	return w.r.timer.fn(w.sctx, f)
}

// noRecords is what take returns when no record came but a timer is due.
var noRecords = []*kgo.Record{}
