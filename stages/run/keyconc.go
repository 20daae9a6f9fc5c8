package run

import (
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

// keyDone reports a record finished by its goroutine.
type keyDone[Out any] struct {
	i   int
	res keyResult[Out]
}

// processByKey runs the records of batch with Config.KeyConcurrency
// concurrent calls: the records of one key (equal Kafka keys; records
// without a key are one key) run one after the other in offset order,
// those of different keys concurrently, at most KeyConcurrency at a time,
// the record waiting longest (the lowest offset) first. While fewer calls
// run than KeyConcurrency and the batch has nothing left to start, it
// grows by the records queued meanwhile (up to BatchMaxRecords and
// BatchMaxBytes; not with coalescing windows), so that one slow record
// does not idle the partition until its batch ends. A record that stops (a
// fatal error, or errAbandoned) ends the starting of records; those
// already running finish. The results are then taken in offset order up to
// the first record not handled (never started, or stopped): that prefix is
// what the batch commits, so the committed offset never passes a record
// not done, whatever finished after it. The records after that prefix that
// did finish are left for redelivery like the rest, their outputs unwritten;
// their state writes are kept (state may be ahead of the committed offset,
// as after a crash). It returns the batch, grown, with the usual results
// of process.
func (w *worker[In, Out]) processByKey(batch []*kgo.Record, p *pending[Out]) ([]*kgo.Record, *pending[Out], int, error) {
	cfg := &w.r.cfg
	defer w.doing(blockedStage)()
	var res []keyResult[Out]
	waiting := map[string][]int{} // per key, its records not started, in offset order
	var order []string            // the keys with records waiting
	active := map[string]bool{}   // keys with a record running
	done := make(chan keyDone[Out], cfg.KeyConcurrency)
	running, halted := 0, false
	bytes := 0
	var grown int64 // memory budget: the records taken here, released when they are processed (the worker releases the rest)
	enqueue := func(recs []*kgo.Record) {
		for _, rec := range recs {
			i := len(res)
			res = append(res, keyResult[Out]{})
			bytes += len(rec.Value)
			if rec.Attrs.IsControl() {
				continue
			}
			k := string(rec.Key)
			if len(waiting[k]) == 0 { // not in order yet
				order = append(order, k)
			}
			waiting[k] = append(waiting[k], i)
		}
	}
	// next returns the index of the record to start: the lowest waiting
	// one of a key without a record running; -1 when there is none.
	next := func() int {
		best, at := -1, -1
		for j, k := range order {
			if !active[k] && len(waiting[k]) > 0 && (best < 0 || waiting[k][0] < best) {
				best, at = waiting[k][0], j
			}
		}
		if at >= 0 {
			k := order[at]
			waiting[k] = waiting[k][1:]
			if len(waiting[k]) == 0 {
				order = append(order[:at], order[at+1:]...)
				delete(waiting, k)
			}
		}
		return best
	}
	enqueue(batch)
	for {
		for !halted && running < cfg.KeyConcurrency {
			i := next()
			if i < 0 && w.win == nil && !w.isStopping() && len(batch) < cfg.BatchMaxRecords {
				more := w.takeNow(cfg.BatchMaxRecords-len(batch), min(cfg.BatchMaxBytes, w.r.batchBytes())-bytes)
				w.r.m.in.WithLabelValues(w.tp.topic).Add(float64(dataRecords(more)))
				batch = append(batch, more...)
				grown += recordsBytes(more)
				enqueue(more)
				i = next()
			}
			if i < 0 {
				break
			}
			rec := batch[i]
			active[string(rec.Key)] = true
			running++
			go func() {
				outs, dl, err := w.processOne(rec)
				done <- keyDone[Out]{i: i, res: keyResult[Out]{ran: true, outs: outs, dl: dl, err: err}}
			}()
		}
		if running == 0 {
			break
		}
		select {
		case d := <-done:
			running--
			res[d.i] = d.res
			active[string(batch[d.i].Key)] = false
			halted = halted || d.res.err != nil
		case <-w.wake: // records queued: the loop above may take them
		}
	}
	w.releaseRecords(grown)
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
			return batch, p, i, stopErr
		}
		p.add(i, res[i].outs, res[i].dl)
	}
	return batch, p, len(batch), nil
}
