package run

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The poll loop's backpressure pauses a full partition at once when another
// partition is hungry (records beyond those pushed, a short queue): waiting
// for the full one to drain would starve the hungry one's worker, as the
// loop polls for every partition. When none is hungry it keeps waiting
// before it pauses (the context, cancelled here, ends the wait first), so
// a full queue that drains in time is not paused.
func TestBackpressurePausesFullPartitionAtOnceWhenAnotherIsHungry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		next, hwm   int64 // partition 1's position and high watermark
		queued      int   // partition 1's queue
		pausedOther bool  // partition 1 paused already
		wantPaused  bool  // partition 0 paused when waitForCapacity returns
	}{
		{name: "other behind, queue empty", next: 10, hwm: 500, wantPaused: true},
		{name: "other behind, queue below half", next: 10, hwm: 500, queued: 3, wantPaused: true},
		{name: "other caught up", next: 500, hwm: 500},
		{name: "other never fetched", next: -1, hwm: 0},
		{name: "other behind, queue above half", next: 10, hwm: 500, queued: 6},
		{name: "other behind but paused", next: 10, hwm: 500, pausedOther: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, full, other, cl := twoPartitionRunner(t)
			fill(full, 10) // at MaxInFlight
			full.next = 10
			full.hwm.Store(1000)
			fill(other, tc.queued)
			other.next = tc.next
			other.hwm.Store(tc.hwm)
			if tc.pausedOther {
				other.setPause(pauseRetry, true)
			}

			ctx, cancel := context.WithCancel(t.Context())
			cancel() // a wait returns at once, without pausing
			r.waitForCapacity(ctx)

			paused := cl.PauseFetchPartitions(nil)["in"]
			got := false
			for _, p := range paused {
				got = got || p == 0
			}
			if got != tc.wantPaused {
				t.Fatalf("full partition paused = %v (paused: %v), want %v", got, paused, tc.wantPaused)
			}
		})
	}
}

// A full queue that its worker drains while the poll loop decides to pause
// it must not stay paused: the partition's fetches resume only when the
// worker dequeues, and a drained worker dequeues no more, so a pause that
// lands after the last dequeue stops the partition for good (its records
// are never fetched, its window never closes). Each round races the loop's
// waitForCapacity (another partition is hungry, so it pauses at once)
// against a worker that dequeues the whole queue; whichever wins, the
// drained partition must end up fetching.
func TestBackpressureNeverLeavesADrainedQueuePaused(t *testing.T) {
	t.Parallel()
	r, full, other, _ := twoPartitionRunner(t)
	other.next = 10 // hungry: behind its high watermark, queue empty
	other.hwm.Store(500)
	full.hwm.Store(1 << 40)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	const rounds = 20_000
	for round := range rounds {
		fill(full, r.cfg.MaxInFlight)
		full.next = int64(r.cfg.MaxInFlight)
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			for full.queued() > 0 {
				full.dequeue(r.cfg.MaxInFlight, 1<<30, true)
			}
		}()
		r.waitForCapacity(ctx)
		<-drained
		full.pmu.Lock()
		paused := full.paused
		full.pmu.Unlock()
		if paused != 0 {
			t.Fatalf("round %d of %d: the queue drained and its partition stayed paused (%b)", round, rounds, paused)
		}
	}
}

// twoPartitionRunner returns a runner of a kfake client (see pauseClient)
// with MaxInFlight 10 and workers for partitions 0 and 1 of topic "in".
func twoPartitionRunner(t *testing.T) (r *Runner[string, string], p0, p1 *worker[string, string], cl *kgo.Client) {
	t.Helper()
	cl, m := pauseClient(t, 2)
	r = &Runner[string, string]{cl: cl, m: m, base: t.Context(), budget: NewBudget(DefaultBudget),
		workers: map[tp]*worker[string, string]{}, drained: make(chan struct{}, 1)}
	r.cfg.MaxInFlight = 10
	p0, p1 = newWorker(r, tp{"in", 0}), newWorker(r, tp{"in", 1})
	r.workers[p0.tp], r.workers[p1.tp] = p0, p1
	return r, p0, p1, cl
}

// fill appends n records of w's partition to its queue.
func fill(w *worker[string, string], n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range n {
		w.queue = append(w.queue, &kgo.Record{Topic: "in", Partition: w.tp.partition, Offset: int64(i), Value: []byte("v")})
	}
}
