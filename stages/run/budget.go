package run

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Budget is one memory budget, in bytes, for what the runners sharing it
// hold: the records fetched and not yet processed (the partitions' queues
// and the batches being processed, counted by their key, value and headers
// plus a per-record overhead) and the outputs held by coalescing windows
// (see [WindowConfig]). It never refuses or drops data; it steers:
//
//   - a runner stops polling while the budget is full (fetches pause: the
//     Kafka client then holds at most its fetch buffers, which the runner
//     sizes from the budget too), and polls again once workers processed
//     records or windows were written; a partition whose queue holds more
//     than its share of an eighth of the budget has its fetches paused like
//     a queue at Config.MaxInFlight, and a batch holds at most a 64th of it;
//   - a window is closed (written) early when the budget is full, counting
//     the windows already being written as free, so that only as many
//     windows close as are needed (sluice_window_budget_closes_total);
//   - the parts of windows that hold encoded outputs ([Encoder]) are
//     decoded and written one or two at a time across the process.
//
// Usage can overshoot the limit by one poll (at most Config.MaxInFlight
// records). What a write in progress decodes, the sink's buffers, the
// stage's outputs of the batch being processed and the garbage collector's
// headroom are not counted: keep the budget well below the process's
// memory limit (the default is 35 % of it, see BudgetFor). Safe for
// concurrent use; one Budget may be shared by all runners of a process
// (WithBudget). The sluice_memory_* gauges show it.
type Budget struct {
	limit   int64
	records atomic.Int64 // bytes of records fetched and not yet processed
	windows atomic.Int64 // bytes of outputs held by windows
	closing atomic.Int64 // bytes of windows being written (part of windows)

	mu      sync.Mutex
	state   uint32        // budgetFull | budgetPressure, as last notified
	changed chan struct{} // closed (and replaced) when state changes

	wmu     sync.Mutex
	writing int64         // encoded bytes of window parts being decoded and written
	written chan struct{} // closed (and replaced) when a part's write ends
}

// Budget states.
const (
	budgetFull     = 1 << iota // records + windows ≥ limit: do not poll
	budgetPressure             // records + windows − closing ≥ limit: close windows
)

// NewBudget returns a budget of limit bytes (at least MinBudget).
func NewBudget(limit int64) *Budget {
	return &Budget{limit: max(limit, MinBudget), changed: make(chan struct{}), written: make(chan struct{})}
}

// Limit returns the budget in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Used returns the bytes held: records not yet processed and window outputs.
func (b *Budget) Used() int64 { return b.records.Load() + b.windows.Load() }

// addRecords and addWindows account n bytes (negative: released).
func (b *Budget) addRecords(n int64) { b.records.Add(n); b.update() }
func (b *Budget) addWindows(n int64) { b.windows.Add(n); b.update() }
func (b *Budget) addClosing(n int64) { b.closing.Add(n); b.update() }

func (b *Budget) compute() uint32 {
	rec, win, closing := b.records.Load(), b.windows.Load(), b.closing.Load()
	var s uint32
	if rec+win >= b.limit {
		s |= budgetFull
	}
	if rec+win-closing >= b.limit {
		s |= budgetPressure
	}
	return s
}

// update wakes the waiters of wait when the state changed. Every change of
// a counter is followed by an update, which reads the counters under the
// lock: the last update sees the final state, so no change goes
// unnotified (a check outside the lock could store a state older than the
// one a concurrent update just stored).
func (b *Budget) update() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.compute(); s != b.state {
		b.state = s
		close(b.changed)
		b.changed = make(chan struct{})
	}
}

// wait returns a channel closed at the next state change. Take it before
// checking the state, so that no change is missed.
func (b *Budget) wait() <-chan struct{} {
	ch, _ := b.notified()
	return ch
}

// notified returns the channel closed at the next state change and the
// state last notified, taken together. A waiter that blocks must decide on
// that state, not on the counters: counters read between a change and its
// update may show a state that is never notified (a hold fills the budget,
// a release empties it again, and both updates see it not full), and the
// channel is closed only when the notified state changes.
func (b *Budget) notified() (<-chan struct{}, uint32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed, b.state
}

// pollable reports whether a runner may poll: the budget is not full.
func (b *Budget) pollable() bool { return b.compute()&budgetFull == 0 }

// pressure reports whether windows should close early: what is held,
// without the windows being written, fills the budget.
func (b *Budget) pressure() bool { return b.compute()&budgetPressure != 0 }

// recordsShare: the queues of a runner's partitions may hold
// 1/recordsShare of the budget together (each its share of it, see
// Runner.partitionShare) before a partition's fetches pause; the rest is
// for windows. A few batches per partition keep the workers busy; more only
// takes the windows' memory.
const recordsShare = 8

// acquireWrite waits until a window part of n encoded bytes may be decoded
// and written: when no part is being written, or the parts being written
// and this one stay within writeAllowance. Decoded outputs and the sink's
// buffers for them take a few times their encoded size and are not in the
// budget, so this bounds them for the whole process: windows closing
// together (at their MaxAge, say) write one or two parts at a time instead
// of all at once. It returns ctx's error when ctx ends first.
func (b *Budget) acquireWrite(ctx context.Context, n int64) error {
	for {
		b.wmu.Lock()
		if b.writing == 0 || b.writing+n <= b.writeAllowance() {
			b.writing += n
			b.wmu.Unlock()
			return nil
		}
		ch := b.written
		b.wmu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// releaseWrite ends the write of a part acquired with acquireWrite(n).
func (b *Budget) releaseWrite(n int64) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.writing -= n
	close(b.written)
	b.written = make(chan struct{})
}

// writeAllowance is the encoded bytes of window parts written at once:
// two parts of windowPartBytes.
func (b *Budget) writeAllowance() int64 { return 2 * b.windowPartBytes() }

// windowPartBytes bounds the encoded outputs of one Write of a window (see
// closeWindow): a 32nd of the budget, within 1–16 MiB.
func (b *Budget) windowPartBytes() int64 { return min(max(b.limit/32, 1<<20), 16<<20) }

// MinBudget is the smallest budget: below it a window could not hold one
// batch's outputs of the records a single fetch brings.
const MinBudget = 4 << 20

// Fetch sizing: the client buffers at most maxConcurrentFetches fetch
// responses at once (one per broker by default, without a bound), each up
// to FetchMaxBytes compressed; JSON records decompress to 2–4 × that. A
// 64th of the budget, compressed, keeps those buffers within about a
// tenth of it.
const (
	maxConcurrentFetches = 2
	minFetchBytes        = 1 << 20
	maxFetchBytes        = 50 << 20 // kgo's default
)

// fetchOpts returns the client options that size kgo's fetch buffering
// from the budget: FetchMaxBytes (budget/64 over maxConcurrentFetches,
// within 1–50 MiB), FetchMaxPartitionBytes (at most FetchMaxBytes, 1 MiB
// by default), MaxConcurrentFetches and BrokerMaxReadBytes (a bound on one
// response kgo reads, not a buffer: it must stay above FetchMaxBytes, and a
// single record batch larger than the fetch limits is still returned, so
// it keeps kgo's 100 MiB unless FetchMaxBytes needs more). Options given
// with WithKafkaOpts come later and override these.
func fetchOpts(b *Budget) []kgo.Opt {
	fetch := int32(min(max(b.limit/64/maxConcurrentFetches, minFetchBytes), maxFetchBytes))
	return []kgo.Opt{
		kgo.FetchMaxBytes(fetch),
		kgo.FetchMaxPartitionBytes(min(fetch, 1<<20)),
		kgo.MaxConcurrentFetches(maxConcurrentFetches),
		kgo.BrokerMaxReadBytes(max(100<<20, 2*fetch)),
	}
}

// recordOverhead approximates the heap a fetched record holds besides its
// key, value and headers (the kgo.Record and its share of the batch).
const recordOverhead = 256

// recordBytes returns the bytes a fetched record counts in the budget.
func recordBytes(rec *kgo.Record) int64 {
	n := len(rec.Key) + len(rec.Value) + recordOverhead
	for _, h := range rec.Headers {
		n += len(h.Key) + len(h.Value) + 32
	}
	return int64(n)
}

// recordsBytes sums recordBytes over recs.
func recordsBytes(recs []*kgo.Record) int64 {
	n := int64(0)
	for _, rec := range recs {
		n += recordBytes(rec)
	}
	return n
}

// budgetMetrics registers the gauges of a runner's budget on reg (wrapped
// with the pipeline label): sluice_memory_budget_bytes, the budget (shared
// by the runners of a process), and sluice_memory_held_bytes{kind}, the
// bytes this runner holds, kind records (fetched, not yet processed) or
// windows (outputs held by coalescing windows); and returns the counter
// sluice_window_budget_closes_total, the windows closed early because the
// budget was full.
func budgetMetrics(reg prometheus.Registerer, b *Budget, held *heldBytes) (prometheus.Counter, error) {
	closes := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_window_budget_closes_total",
		Help: "Coalescing windows closed (written) before their bounds because the memory budget was full.",
	})
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_memory_budget_bytes",
			Help: "The memory budget of the records and coalescing windows of the process's runners (sluice run --memory-budget, else 35 % of GOMEMLIMIT or of the cgroup's memory limit, whichever is lower, else 96 MiB).",
		}, func() float64 { return float64(b.limit) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_memory_held_bytes", Help: heldHelp, ConstLabels: prometheus.Labels{"kind": "records"},
		}, func() float64 { return float64(held.records.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_memory_held_bytes", Help: heldHelp, ConstLabels: prometheus.Labels{"kind": "windows"},
		}, func() float64 { return float64(held.windows.Load()) }),
		closes,
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register budget metrics: %w", err)
		}
	}
	return closes, nil
}

const heldHelp = "Bytes this pipeline holds in the memory budget, per kind: records (fetched, not yet processed) and windows (outputs held by coalescing windows)."

// heldBytes is what one runner holds in its (possibly shared) budget.
type heldBytes struct {
	b       *Budget
	records atomic.Int64
	windows atomic.Int64
}

func (h *heldBytes) addRecords(n int64) {
	if n != 0 {
		h.records.Add(n)
		h.b.addRecords(n)
	}
}

func (h *heldBytes) addWindows(n int64) {
	if n != 0 {
		h.windows.Add(n)
		h.b.addWindows(n)
	}
}

// WithBudget makes the runner hold its records and windows within b,
// shared with the other runners given b (default: a budget of its own,
// BudgetFor(0, CurrentMemoryLimits())). The transactional runner does not
// use it.
func WithBudget(b *Budget) Option { return func(o *options) { o.budget = b } }

// initBudget sets up the runner's share of its budget and the budget's
// metrics (registered on reg with the pipeline label).
func (r *Runner[In, Out]) initBudget(reg prometheus.Registerer) error {
	r.budget = r.o.budget
	if r.budget == nil {
		limit, _ := BudgetFor(0, CurrentMemoryLimits())
		r.budget = NewBudget(limit)
	}
	r.mem = &heldBytes{b: r.budget}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	closes, err := budgetMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": r.cfg.Name}, reg), r.budget, r.mem)
	if err != nil {
		return fmt.Errorf("pipeline %s: %w", r.cfg.Name, err)
	}
	r.budgetCloses = closes
	return nil
}

// waitForBudget holds the poll loop while the budget is full (see Budget):
// the workers drain their queues and close windows meanwhile. Records
// already fetched are never dropped.
func (r *Runner[In, Out]) waitForBudget(ctx context.Context) {
	for {
		changed, state := r.budget.notified()
		if state&budgetFull == 0 {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// partitionShare returns the bytes of records one partition's queue may
// hold before its fetches pause like a queue at Config.MaxInFlight: the
// records' share of the budget split over the n assigned partitions, at
// least minPartitionShare (above one fetch of a partition, decompressed:
// a bound below it would pause every fetch).
func (r *Runner[In, Out]) partitionShare(n int) int64 {
	return max(r.budget.limit/recordsShare/int64(max(n, 1)), minPartitionShare)
}

const minPartitionShare = 4 << 20

// batchBytes bounds the record values of one batch besides
// Config.BatchMaxBytes: a 64th of the budget, at least 1 MiB. The stage's
// outputs of a batch being processed are live besides its records and
// are not counted in the budget; every partition may be processing one.
func (r *Runner[In, Out]) batchBytes() int {
	return int(max(r.budget.limit/64, 1<<20))
}

// recordHold is what a worker's records (queued, or in the batch being
// processed) count in the runner's budget. Safe for concurrent use.
type recordHold struct {
	mu       sync.Mutex
	bytes    int64
	released bool // released all for good: later changes are ignored
}

// hold counts n more bytes of records of w.
func (w *worker[In, Out]) holdRecords(n int64) { w.rec.change(w.r.mem, n) }

// releaseRecords gives back n bytes of processed records of w.
func (w *worker[In, Out]) releaseRecords(n int64) { w.rec.change(w.r.mem, -n) }

// queueSize returns the records in w's queue and their bytes, read together.
func (w *worker[In, Out]) queueSize() (int, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue), w.qbytes
}

func (h *recordHold) change(mem *heldBytes, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return
	}
	h.bytes += n
	mem.addRecords(n)
}

// releaseAll gives back every byte for good: the worker exited or was
// abandoned, and its queue is dropped (redelivered to the next owner).
func (h *recordHold) releaseAll(mem *heldBytes) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.released {
		mem.addRecords(-h.bytes)
		h.bytes, h.released = 0, true
	}
}
