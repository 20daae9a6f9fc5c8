package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// endCheckInterval is how often a runner with Config.StopAtEnd looks at
// its progress.
const endCheckInterval = 100 * time.Millisecond

// endWatch decides when a runner with Config.StopAtEnd stops. The poll
// loop reports what it fetched (fetched); run compares the group's offsets
// with the pending ends every endCheckInterval.
type endWatch struct {
	ends map[tp]int64 // the pending partitions and the end each must reach
	idle time.Duration
	done chan struct{} // closed when run returned

	mu      sync.Mutex
	next    map[tp]int64 // offset after the last record fetched, per partition
	arrived time.Time    // when records last arrived (the start before any)
}

// newEndWatch lists the end offsets of topics' partitions (last stable
// offsets under read_committed, see readsCommitted) and group's committed
// offsets with a client of its own, and returns the watch of the
// partitions not committed up to their end, or nil when there is none. A
// missing topic is an error.
func newEndWatch(ctx context.Context, kopts []kgo.Opt, group string, topics []string, idle time.Duration) (*endWatch, error) {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("stop at end: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	list := adm.ListEndOffsets
	if readsCommitted(cl) {
		list = adm.ListCommittedOffsets
	}
	ends, err := list(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("stop at end: list end offsets: %w", err)
	}
	for _, topic := range topics {
		ps, ok := ends[topic]
		if te, bad := ps[-1]; !ok || len(ps) == 0 || bad && errors.Is(te.Err, kerr.UnknownTopicOrPartition) {
			return nil, fmt.Errorf("stop at end: input topic %s does not exist", topic)
		}
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("stop at end: list start offsets: %w", err)
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topics...)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) { // not found: a new group, nothing committed
		return nil, fmt.Errorf("stop at end: offsets of group %s: %w", group, err)
	}
	w := &endWatch{ends: map[tp]int64{}, idle: idle, done: make(chan struct{}), next: map[tp]int64{}, arrived: time.Now()}
	for topic, ps := range ends {
		for p, e := range ps {
			if e.Err != nil {
				return nil, fmt.Errorf("stop at end: end offset of %s/%d: %w", topic, p, e.Err)
			}
			pos := int64(0)
			if s, ok := starts.Lookup(topic, p); ok && s.Err == nil {
				pos = s.Offset
			}
			if c, ok := committed.Lookup(topic, p); ok && c.Err == nil && c.At > pos {
				pos = c.At
			}
			if pos < e.Offset {
				w.ends[tp{topic, p}] = e.Offset
			}
		}
	}
	if len(w.ends) == 0 {
		return nil, nil
	}
	return w, nil
}

// fetched notes that the poll loop handed a partition's records up to
// next (excluded) to its worker. Safe on a nil watch.
func (w *endWatch) fetched(topic string, partition int32, next int64) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next[tp{topic, partition}] = next
	w.arrived = time.Now()
}

// run calls stop and returns once check says so, or when ctx is done.
func (w *endWatch) run(ctx context.Context, cl *kgo.Client, log *slog.Logger, stop func()) {
	defer close(w.done)
	t := time.NewTicker(endCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if why := w.check(positions(cl.CommittedOffsets(), cl.MarkedOffsets()), time.Now()); why != "" {
			log.Info("stopping at end (StopAtEnd): " + why)
			stop()
			return
		}
	}
}

// check returns why the runner should stop, given the group's position
// (committed or marked offset) of the partitions it knows (see positions)
// at now, or "" when it should go on.
func (w *endWatch) check(pos map[tp]int64, now time.Time) string {
	short := 0
	for k, end := range w.ends {
		if p, ok := pos[k]; !ok || p < end {
			short++
		}
	}
	if short == 0 {
		return fmt.Sprintf("the %d pending partition(s) reached their end", len(w.ends))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.arrived) < w.idle {
		return ""
	}
	for k, next := range w.next {
		if p, ok := pos[k]; ok && p < next {
			return "" // records in hand (a sink retrying, say): not idle
		}
	}
	return fmt.Sprintf("no record arrived for %s, %d of %d pending partition(s) short of their end (held by another member, or deleted by retention); they are left to the next run",
		w.idle, short, len(w.ends))
}

// wait returns once run returned; at once for a nil watch.
func (w *endWatch) wait() {
	if w != nil {
		<-w.done
	}
}

// positions merges kgo's committed and marked offsets (Client.CommittedOffsets
// and MarkedOffsets) into the group's position per partition: the larger.
// A partition not assigned to this member is absent.
func positions(committed, marked map[string]map[int32]kgo.EpochOffset) map[tp]int64 {
	pos := map[tp]int64{}
	for _, m := range []map[string]map[int32]kgo.EpochOffset{committed, marked} {
		for topic, ps := range m {
			for p, eo := range ps {
				k := tp{topic, p}
				if old, ok := pos[k]; !ok || eo.Offset > old {
					pos[k] = eo.Offset
				}
			}
		}
	}
	return pos
}

// dataRecords counts the records of batch that are not transaction markers
// (control records, see [WithKafkaOpts]).
func dataRecords(batch []*kgo.Record) int {
	n := 0
	for _, rec := range batch {
		if !rec.Attrs.IsControl() {
			n++
		}
	}
	return n
}

// noDLQ is the fatal error of a runner with Config.NoDLQ that has a record
// to dead-letter: dl, the dead letter that would have been produced, names
// the record and why.
func noDLQ(dl *kgo.Record) error {
	h := func(key string) string { v, _ := headerValue(dl, key); return v }
	return stages.Fatal(fmt.Errorf("no DLQ topic (NoDLQ): %s/%s@%s would be dead-lettered as %s (rule %q, stage %s): %s",
		h(stages.HeaderSourceTopic), h(stages.HeaderSourcePartition), h(stages.HeaderSourceOffset),
		h(stages.HeaderReason), h(stages.HeaderRule), h(stages.HeaderStage), h(stages.HeaderError)))
}
