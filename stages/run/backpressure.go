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
		if !hungry {
			if deadline == nil {
				t := time.NewTimer(backpressureWait)
				defer t.Stop()
				deadline = t.C
			}
			select {
			case <-r.drained:
				continue
			case <-ctx.Done():
				return
			case <-deadline:
			}
		}
		for _, w := range full {
			w.pauseIfFull(share)
		}
		return
	}
}

// pauseIfFull pauses w's fetches for backpressure if its queue is still
// full (see worker.full). The check and the pause hold the queue's lock, so
// a dequeue either ran before them (and the queue is seen drained) or runs
// after the pause (and resumes it when enough has drained): a pause cannot
// land after the dequeue that emptied the queue, which would leave the
// partition paused with no worker left to resume it.
func (w *worker[In, Out]) pauseIfFull(share int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.atFullMark(len(w.queue), w.qbytes, share) {
		w.setPause(pauseBackpressure, true)
	}
}

// backpressureWait is how long the poll loop waits for a full partition queue
// to drain before pausing that partition.
const backpressureWait = 250 * time.Millisecond
