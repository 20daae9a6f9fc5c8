package run

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func (r *Runner[In, Out]) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	// The generation of this assignment: the workers' fencing epoch (fence.go).
	_, gen := cl.GroupMetadata()
	r.gen.Store(gen)
	ctx = context.WithValue(ctx, generationKey{}, gen)
	if r.o.onAssigned != nil && len(assigned) > 0 {
		if err := r.o.onAssigned(ctx, assigned); err != nil {
			r.fail(fmt.Errorf("assign hook: %w", err))
			return
		}
	}
	claims, err := r.claimAll(ctx, gen, assigned) // WithOffsetStore (offsetstore.go)
	if err != nil {
		r.o.log.Warn("partitions not started: the group session ended before their claim", "err", err)
		return
	}
	r.mu.Lock()
	for topic, ps := range assigned {
		for _, p := range ps {
			k := tp{topic, p}
			if r.workers[k] != nil {
				continue
			}
			w := newWorker(r, k)
			w.claim = claims[k]
			r.workers[k] = w
			r.m.assigned.Inc()
			go w.loop()
		}
	}
	r.mu.Unlock()
	r.ready.Store(true)
	r.o.log.Info("partitions assigned", "partitions", assigned)
}

func (r *Runner[In, Out]) detach(ps map[string][]int32) []*worker[In, Out] {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ws []*worker[In, Out]
	for topic, parts := range ps {
		for _, p := range parts {
			k := tp{topic, p}
			if w := r.workers[k]; w != nil {
				ws = append(ws, w)
				delete(r.workers, k)
			}
			r.m.lag.DeleteLabelValues(topic, strconv.Itoa(int(p)))
		}
	}
	return ws
}

func (r *Runner[In, Out]) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	ws := r.detach(revoked)
	r.stopWorkers(ws)
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RevokeTimeout)
	defer cancel()
	if err := r.commitNow(cctx); err != nil {
		r.m.errors.WithLabelValues("commit").Inc()
		r.o.log.Error("commit on revoke failed", "err", err)
	}
	for _, w := range ws {
		w.owner.gone.Store(true) // what the revoke did not commit is the next owner's
	}
	if r.o.onRevoked != nil && len(revoked) > 0 {
		r.o.onRevoked(ctx, revoked)
	}
	if len(revoked) > 0 {
		r.o.log.Info("partitions revoked", "partitions", revoked)
	}
}

func (r *Runner[In, Out]) onLost(ctx context.Context, cl *kgo.Client, lost map[string][]int32) {
	ws := r.detach(lost)
	for _, w := range ws {
		w.lost.Store(true)
		w.owner.gone.Store(true)
	}
	r.awaitWorkers(ws, 0)
	if r.o.onRevoked != nil && len(lost) > 0 {
		r.o.onRevoked(ctx, lost)
	}
	r.o.log.Warn("partitions lost", "partitions", lost)
}

// stopWorkers asks workers to finish their current batch and waits for them,
// cancelling those still busy after RevokeTimeout (see awaitWorkers).
func (r *Runner[In, Out]) stopWorkers(ws []*worker[In, Out]) {
	for _, w := range ws {
		close(w.stopping)
	}
	r.awaitWorkers(ws, r.cfg.RevokeTimeout)
}

// awaitWorkers waits up to timeout for workers to finish, then cancels those
// still running and waits abandonGrace more. A worker that has not returned
// by then (blocked in a sink or stage that ignores its context) is
// abandoned: it is left running but never marks an offset and no longer
// pauses or resumes its partition, so a shutdown or a rebalance never hangs
// on it; its batch is redelivered.
func (r *Runner[In, Out]) awaitWorkers(ws []*worker[In, Out], timeout time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	rest := waitDone(ws, deadline.C)
	if len(rest) == 0 {
		return
	}
	for _, w := range rest {
		w.cancel()
	}
	grace := time.NewTimer(abandonGrace)
	defer grace.Stop()
	for _, w := range waitDone(rest, grace.C) {
		w.abandon()
		r.m.errors.WithLabelValues("abandoned").Inc()
		r.o.log.Error("worker did not stop after its context was cancelled; abandoned, its batch will be redelivered",
			"topic", w.tp.topic, "partition", w.tp.partition, "blocked_in", w.blocker())
	}
}

// waitDone waits for the workers in order until timeout fires and returns
// those not done by then.
func waitDone[In, Out any](ws []*worker[In, Out], timeout <-chan time.Time) []*worker[In, Out] {
	for i, w := range ws {
		select {
		case <-w.done:
		case <-timeout:
			var rest []*worker[In, Out]
			for _, w := range ws[i:] {
				select {
				case <-w.done:
				default:
					rest = append(rest, w)
				}
			}
			return rest
		}
	}
	return nil
}

// abandonGrace is how long a cancelled worker may take to return before it
// is abandoned.
const abandonGrace = 2 * time.Second
