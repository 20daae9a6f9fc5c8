package run

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// keyResult is what processOne returned for one record of a batch run
// concurrently by key; ran is false for a record never started (its key's
// lane stopped at an earlier record, or the batch halted first).
type keyResult[Out any] struct {
	ran  bool
	outs []Out
	dl   dlqItem
	err  error
}

// processByKey runs the records of batch with Config.KeyConcurrency lanes:
// the records of one key (equal Kafka keys; records without a key are one
// key) run one after the other in offset order on one lane, those of
// different keys concurrently, at most KeyConcurrency at a time, keys
// starting in the order of their first record. A record that stops (a
// fatal error, or errAbandoned) ends its key's lane and keeps the other
// lanes from starting records; those already running finish. The results
// are then taken in batch order up to the first record not handled
// (never started, or stopped): that prefix is what the batch commits, so
// the committed offset never passes a record not done, whatever finished
// after it. The stage calls of the records after that prefix that did
// finish are left for redelivery like the rest; their state writes are
// kept (state may be ahead of the committed offset, as after a crash).
func (w *worker[In, Out]) processByKey(batch []*kgo.Record, p *pending[Out]) (*pending[Out], int, error) {
	lanes := keyLanes(batch)
	res := make([]keyResult[Out], len(batch))
	var next atomic.Int64 // index into lanes of the next lane to start
	var halt atomic.Bool
	var wg sync.WaitGroup
	defer w.doing(blockedStage)()
	for range min(w.r.cfg.KeyConcurrency, len(lanes)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				l := int(next.Add(1)) - 1
				if l >= len(lanes) {
					return
				}
				for _, i := range lanes[l] {
					if halt.Load() {
						break
					}
					outs, dl, err := w.processOne(batch[i])
					res[i] = keyResult[Out]{ran: true, outs: outs, dl: dl, err: err}
					if err != nil {
						halt.Store(true)
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	var stopErr error
	for i := range res { // the first error by offset is the batch's
		if res[i].err != nil {
			stopErr = res[i].err
			break
		}
	}
	for i, rec := range batch {
		if rec.Attrs.IsControl() {
			continue
		}
		if !res[i].ran || res[i].err != nil {
			return p, i, stopErr
		}
		p.add(i, res[i].outs, res[i].dl)
	}
	return p, len(batch), nil
}

// keyLanes groups the indexes of batch's data records by key, each group
// in offset order, the groups in the order of their first record.
func keyLanes(batch []*kgo.Record) [][]int {
	var lanes [][]int
	at := map[string]int{}
	for i, rec := range batch {
		if rec.Attrs.IsControl() {
			continue
		}
		l, ok := at[string(rec.Key)]
		if !ok {
			l = len(lanes)
			at[string(rec.Key)] = l
			lanes = append(lanes, nil)
		}
		lanes[l] = append(lanes[l], i)
	}
	return lanes
}
