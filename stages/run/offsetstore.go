package run

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// OffsetStore keeps, next to a sink's effects and in the same transactions,
// the offset after the last batch of each partition whose effects are
// durable, and the epoch of the partition's owner: exactly-once effects for
// a sink whose effect is not idempotent (a counter, an append). The sink
// writes each batch's rows and its [stages.Position] in one transaction,
// refusing it when the store holds a greater owner epoch for the partition;
// the runner claims each partition it is assigned before processing it.
// pgsink.Sink built with pgsink.WithOffsets is one.
type OffsetStore interface {
	// Claim makes the caller the owner of group's partition with an epoch
	// at least generation and greater than every epoch the store holds for
	// it, and returns that epoch and the stored next offset (-1: none).
	// Once it returned, a write of the partition by a previous owner that
	// has not committed is refused, and one that has is reflected in next.
	// It must be safe for concurrent use.
	Claim(ctx context.Context, group, topic string, partition, generation int32) (next int64, epoch int32, err error)
}

// WithOffsetStore makes the runner keep the sink's effects exactly once
// with store (see [OffsetStore]); the sink must store each Write's
// [stages.Position] (from its context) with its effects. When the runner is
// assigned a partition, it claims it from store before the partition's
// worker starts (retrying with Config.SinkRetry's backoff while the claim
// fails). The partition still starts at the group's committed offset, but
// the outputs of records below the stored offset are not written: their
// effects are durable already. Their dead letters and state are produced
// again as in any redelivery. Kafka commits go on as before (lag,
// monitoring, where a replay starts); the store decides what is written.
// Not supported with coalescing windows (Config.Window), timers
// ([WithTimers]) or the transactional runner.
func WithOffsetStore(store OffsetStore) Option {
	return func(o *options) { o.offsets = store }
}

// claimed is a partition's claim: the stored next offset (-1: none) and
// the owner epoch.
type claimed struct {
	next  int64
	epoch int32
}

// checkOffsetStore reports the settings an offset store does not support.
func checkOffsetStore(cfg Config, o options) error {
	if o.offsets == nil {
		return nil
	}
	if cfg.Window.MaxKeys > 0 {
		return fmt.Errorf("pipeline %s: WithOffsetStore does not support coalescing windows (Config.Window)", cfg.Name)
	}
	if o.timers != nil {
		return fmt.Errorf("pipeline %s: WithOffsetStore does not support timers (WithTimers)", cfg.Name)
	}
	if cfg.KeyConcurrency > 1 {
		return fmt.Errorf("pipeline %s: WithOffsetStore does not support Config.KeyConcurrency above 1", cfg.Name)
	}
	return nil
}

// claimAll claims every partition of assigned from the offset store,
// retrying each failed claim with Config.SinkRetry's backoff until it
// succeeds or ctx is done (the group session is ending: then it returns
// ctx's error). Without an offset store it returns nil.
func (r *Runner[In, Out]) claimAll(ctx context.Context, gen int32, assigned map[string][]int32) (map[tp]claimed, error) {
	if r.o.offsets == nil {
		return nil, nil
	}
	out := map[tp]claimed{}
	for topic, ps := range assigned {
		for _, p := range ps {
			for attempt := 1; ; attempt++ {
				next, epoch, err := r.o.offsets.Claim(ctx, r.cfg.Group, topic, p, gen)
				if err == nil {
					out[tp{topic, p}] = claimed{next: next, epoch: epoch}
					r.o.log.Info("partition claimed from the offset store", "topic", topic, "partition", p, "stored_next", next, "epoch", epoch)
					break
				}
				if ctx.Err() != nil {
					return nil, fmt.Errorf("claim %s/%d from the offset store: %w", topic, p, ctx.Err())
				}
				r.m.errors.WithLabelValues("claim").Inc()
				wait := r.cfg.SinkRetry.Backoff(attempt)
				r.o.log.Warn("claim from the offset store failed, retrying", "topic", topic, "partition", p, "attempt", attempt, "wait", wait, "err", err)
				pause(ctx, wait)
			}
		}
	}
	return out, nil
}

// storedOnly drops from p the outputs of the records of batch below the
// partition's stored offset (their effects are durable already, see
// WithOffsetStore) and returns the position to write the rest with; ok is
// false without an offset store. A stored offset past the partition's high
// watermark is a fatal error: the topic was deleted and recreated, or its
// log truncated, and every record of the new log would be skipped.
func (w *worker[In, Out]) storedOnly(batch []*kgo.Record, p *pending[Out]) (pos stages.Position, ok bool, err error) {
	r := w.r
	if r.o.offsets == nil {
		return stages.Position{}, false, nil
	}
	if hwm := w.hwm.Load(); w.claim.next > hwm {
		return stages.Position{}, false, fmt.Errorf("the offset store holds offset %d for %s/%d of group %s, past the partition's end %d: the topic was recreated or its log truncated; delete (or lower) the group's offsets in the store to consume it",
			w.claim.next, w.tp.topic, w.tp.partition, r.cfg.Group, hwm)
	}
	if batch[0].Offset < w.claim.next {
		outs, owners := p.outs[:0], p.owners[:0]
		for i, o := range p.outs {
			if batch[p.owners[i]].Offset >= w.claim.next {
				outs, owners = append(outs, o), append(owners, p.owners[i])
			}
		}
		if d := len(p.outs) - len(outs); d > 0 {
			r.o.log.Debug("outputs of records below the stored offset not written", "topic", w.tp.topic, "partition", w.tp.partition, "outputs", d, "stored_next", w.claim.next)
		}
		clear(p.outs[len(outs):])
		p.outs, p.owners = outs, owners
	}
	last := batch[len(batch)-1]
	return stages.Position{Group: r.cfg.Group, Topic: last.Topic, Partition: last.Partition,
		Next: last.Offset + 1, LeaderEpoch: last.LeaderEpoch, Epoch: w.claim.epoch}, true, nil
}

// sinkCtx returns the context of the sink's Write: the worker's, carrying
// the position of the batch being written with an offset store.
func (w *worker[In, Out]) sinkCtx() context.Context {
	if w.wpos == nil {
		return w.ctx
	}
	return stages.WithPosition(w.ctx, *w.wpos)
}
