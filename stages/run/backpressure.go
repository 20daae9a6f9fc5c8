package run

import (
	"context"
	"time"
)

// waitForCapacity implements backpressure. Before polling again it waits,
// up to backpressureWait, for workers whose queue reached MaxInFlight to
// drain; a worker still full after that has its partition's fetches paused
// (resumed once it drained half its queue) so that one slow partition does
// not hold back the others. Pausing is the slow path on purpose: kgo drops
// the buffered data of a paused partition and a resumed partition waits for
// the next fetch round, so pausing on every full queue would thrash. It is
// not slow while another partition is hungry (see worker.hungry): the full
// ones are paused at once and the loop polls, as waiting would starve the
// hungry partition's worker for as long as the fullest queue takes to drain
// (the loop polls for every partition, and kgo fetches no more until it
// does).
func (r *Runner[In, Out]) waitForCapacity(ctx context.Context) {
	var deadline <-chan time.Time
	for {
		var full []*worker[In, Out]
		hungry := false
		r.mu.Lock()
		share := r.partitionShare(len(r.workers)) // memory budget
		r.partShare.Store(share)
		for _, w := range r.workers {
			if w.full(share) {
				full = append(full, w)
			} else if !hungry {
				hungry = w.hungry(share)
			}
		}
		r.mu.Unlock()
		if len(full) == 0 {
			return
		}
		if hungry {
			for _, w := range full {
				w.setPause(pauseBackpressure, true)
			}
			return
		}
		if deadline == nil {
			t := time.NewTimer(backpressureWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-r.drained:
		case <-ctx.Done():
			return
		case <-deadline:
			for _, w := range full {
				w.setPause(pauseBackpressure, true)
			}
			return
		}
	}
}

// backpressureWait is how long the poll loop waits for a full partition queue
// to drain before pausing that partition.
const backpressureWait = 250 * time.Millisecond
