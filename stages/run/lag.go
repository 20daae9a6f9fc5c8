package run

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// lagInterval is how often watchLag lists the end offsets of the input
// topics.
const lagInterval = 5 * time.Second

// watchLag sets sluice_consumer_lag of every assigned partition each
// options.lagEvery until ctx is done: the partition's end offset (high
// watermark, listed with ListEndOffsets) minus its position (worker.pos:
// the offset after its last batch done, or its first record fetched
// before that). It does not depend on fetches, so the gauge keeps moving
// while a partition's fetches are paused (a sink outage, backpressure, a
// stage's wait); a partition with nothing fetched yet has no position and
// no series. A listing that fails leaves the gauge as it was. The series
// of a revoked partition is deleted on revoke and not set again.
func (r *Runner[In, Out]) watchLag(ctx context.Context) {
	t := time.NewTicker(r.o.lagEvery)
	defer t.Stop()
	adm := kadm.NewClient(r.cl)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, r.o.lagEvery)
		ends, err := adm.ListEndOffsets(lctx, r.cfg.Topics...)
		cancel()
		if err != nil {
			continue
		}
		r.mu.Lock()
		for k, w := range r.workers {
			pos := w.pos.Load()
			end, ok := ends.Lookup(k.topic, k.partition)
			if pos < 0 || !ok || end.Err != nil {
				continue
			}
			r.m.lag.WithLabelValues(k.topic, strconv.Itoa(int(k.partition))).Set(float64(max(end.Offset-pos, 0)))
		}
		r.mu.Unlock()
	}
}
