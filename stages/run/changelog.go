package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stateRuntime is what a runner with state stores or timers keeps beside
// its workers.
type stateRuntime struct {
	stores    []StateStore
	topics    map[string]bool   // changelog topics
	names     map[string]string // store name by changelog topic
	timers    bool              // the runner has a timer function
	m         *stateMetrics
	restoring atomic.Int64 // partitions whose stores are being restored
}

// newStateRuntime validates the stores and timers of a runner of cfg and
// registers their metrics; nil when it has neither.
func newStateRuntime(cfg Config, o options, timers, periodic bool) (*stateRuntime, error) {
	if len(o.stores) == 0 && !timers {
		return nil, nil
	}
	if len(o.stores) > 0 && len(cfg.Topics) != 1 {
		return nil, fmt.Errorf("pipeline %s: state stores need exactly one input topic (a changelog partition has one writer: the worker of the input partition with its number), not %d", cfg.Name, len(cfg.Topics))
	}
	sr := &stateRuntime{stores: o.stores, topics: map[string]bool{}, names: map[string]string{}, timers: timers}
	var names []string
	for _, s := range o.stores {
		switch {
		case slices.Contains(names, s.Name()):
			return nil, fmt.Errorf("pipeline %s: two state stores named %s", cfg.Name, s.Name())
		case sr.topics[s.Topic()]:
			return nil, fmt.Errorf("pipeline %s: two state stores share the changelog %s", cfg.Name, s.Topic())
		case s.Topic() == cfg.Topics[0] || s.Topic() == cfg.DLQTopic:
			return nil, fmt.Errorf("pipeline %s: state store %s: changelog %s is the input or DLQ topic", cfg.Name, s.Name(), s.Topic())
		}
		names = append(names, s.Name())
		sr.topics[s.Topic()] = true
		sr.names[s.Topic()] = s.Name()
	}
	for _, s := range o.stores {
		if err := s.bind(); err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", cfg.Name, err)
		}
	}
	m, err := newStateMetrics(o.reg, cfg.Name, names, periodic)
	if err != nil {
		return nil, fmt.Errorf("register state metrics of pipeline %s: %w", cfg.Name, err)
	}
	sr.m = m
	return sr, nil
}

// check verifies, before the runner joins its group, that every changelog
// exists with the partition count of the input topic, and warns about a
// changelog that is not compacted (its state would go with retention).
func (sr *stateRuntime) check(ctx context.Context, kopts []kgo.Opt, input string, log *slog.Logger) error {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return fmt.Errorf("state stores: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	topics := []string{input}
	for _, s := range sr.stores {
		topics = append(topics, s.Topic())
	}
	td, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("state stores: describe %s: %w", strings.Join(topics, ", "), err)
	}
	in, ok := td[input]
	if !ok || in.Err != nil {
		return fmt.Errorf("state stores: input topic %s does not exist", input)
	}
	var errs []error
	var changelogs []string
	for _, s := range sr.stores {
		d, ok := td[s.Topic()]
		switch {
		case !ok || d.Err != nil:
			errs = append(errs, fmt.Errorf("state store %s: changelog topic %s does not exist (create it compacted, with the %d partitions of %s)", s.Name(), s.Topic(), len(in.Partitions), input))
		case len(d.Partitions) != len(in.Partitions):
			errs = append(errs, fmt.Errorf("state store %s: changelog %s has %d partitions but input %s has %d: they must be co-partitioned (the same partition count)", s.Name(), s.Topic(), len(d.Partitions), input, len(in.Partitions)))
		default:
			changelogs = append(changelogs, s.Topic())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, changelogs...)
	if err != nil {
		log.Warn("state stores: could not read the changelogs' cleanup.policy", "err", err)
		return nil
	}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil && !strings.Contains(*c.Value, "compact") {
				log.Warn("state store changelog is not compacted: retention will delete state", "topic", rc.Name, "cleanup.policy", *c.Value)
			}
		}
	}
	return nil
}

// partitioner returns the runner client's partitioner: records of the
// changelogs go to the partition set on them (the input partition), all
// others are partitioned as kgo does by default.
func (sr *stateRuntime) partitioner() kgo.Partitioner {
	var changelogs []string
	for t := range sr.topics {
		changelogs = append(changelogs, t)
	}
	return CoPartitioner(kgo.UniformBytesPartitioner(64<<10, true, true, nil), changelogs...)
}

// CoPartitioner returns a partitioner that puts the records of the topics
// manual in the partition set on them (Record.Partition: the partition of
// the input record they belong to, for a topic co-partitioned with the
// input) and partitions the records of other topics with other.
func CoPartitioner(other kgo.Partitioner, manual ...string) kgo.Partitioner {
	m := make(map[string]bool, len(manual))
	for _, t := range manual {
		m[t] = true
	}
	return coPartitioner{manual: m, other: other}
}

type coPartitioner struct {
	manual map[string]bool
	other  kgo.Partitioner
}

func (p coPartitioner) ForTopic(t string) kgo.TopicPartitioner {
	if p.manual[t] {
		return kgo.ManualPartitioner().ForTopic(t)
	}
	return p.other.ForTopic(t)
}

// readChangelogs reads the given partitions of the given topics (nil: all
// of the topic's) from their start to their end when it starts, and calls
// apply with every record, in offset order per partition. A requested
// partition a topic does not have is an error. A failed offset listing or
// fetch is handed to retry, which returns whether to go on (after its
// backoff); nil retry, or a false return, makes it the error returned.
// kopts are connection options.
func readChangelogs(ctx context.Context, kopts []kgo.Opt, parts map[string][]int32, apply func(*kgo.Record), retry func(error) bool) error {
	cl, err := kgo.NewClient(append(slices.Clone(kopts), kgo.FetchMaxWait(250*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var topics []string
	for t := range parts {
		topics = append(topics, t)
	}
	var starts, ends kadm.ListedOffsets
	for {
		starts, ends, err = listOffsets(ctx, adm, topics)
		if err == nil {
			break
		}
		if ctx.Err() != nil || retry == nil || !retry(err) {
			return err
		}
	}
	want := map[tp]int64{}
	consume := map[string]map[int32]kgo.Offset{}
	for topic, ps := range parts {
		if ps == nil {
			ends.Each(func(o kadm.ListedOffset) {
				if o.Topic == topic {
					ps = append(ps, o.Partition)
				}
			})
		}
		for _, p := range ps {
			end, ok := ends.Lookup(topic, p)
			if !ok {
				return fmt.Errorf("%s has no partition %d (is it co-partitioned with the input topic?)", topic, p)
			}
			if start, _ := starts.Lookup(topic, p); end.Offset > start.Offset {
				want[tp{topic, p}] = end.Offset
				if consume[topic] == nil {
					consume[topic] = map[int32]kgo.Offset{}
				}
				consume[topic][p] = kgo.NewOffset().At(start.Offset)
			}
		}
	}
	if len(want) == 0 {
		return nil
	}
	cl.AddConsumePartitions(consume)
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("read %s/%d: %w", t, p, err) })
		// The records of the fetch are applied even when a partition
		// failed: the client has moved past them.
		fs.EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			end, ok := want[k]
			if !ok || r.Offset >= end {
				return
			}
			apply(r)
			if r.Offset >= end-1 {
				delete(want, k)
			}
		})
		if ferr != nil && (retry == nil || !retry(ferr)) {
			return ferr
		}
	}
	return nil
}

// listOffsets lists the start and end offsets of topics.
func listOffsets(ctx context.Context, adm *kadm.Client, topics []string) (starts, ends kadm.ListedOffsets, err error) {
	starts, err = adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("start offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	ends, err = adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("end offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	return starts, ends, nil
}

// Read reads the store's changelog from its start to its current end,
// outside any runner, and returns the state of every key by partition, as
// a restore would (the same fence and Fold; undecodable records are
// skipped). partitions limits the read (nil: every partition). kopts are
// connection options.
func (s *Store[V]) Read(ctx context.Context, kopts []kgo.Opt, partitions []int32) (map[int32]map[string]V, error) {
	byPart := map[int32]*Partition[V]{}
	for _, p := range partitions {
		byPart[p] = s.newPartition(tp{partition: p}, false, nil).(*Partition[V])
	}
	err := readChangelogs(ctx, kopts, map[string][]int32{s.cfg.Topic: partitions}, func(r *kgo.Record) {
		p := byPart[r.Partition]
		if p == nil {
			p = s.newPartition(tp{partition: r.Partition}, false, nil).(*Partition[V])
			byPart[r.Partition] = p
		}
		p.restoreRecord(r)
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("state store %s: read %s: %w", s.cfg.Name, s.cfg.Topic, err)
	}
	out := make(map[int32]map[string]V, len(byPart))
	for n, p := range byPart {
		m := make(map[string]V, len(p.m))
		for k, e := range p.m {
			if !e.deleted {
				m[k] = e.val
			}
		}
		out[n] = m
	}
	return out, nil
}

// restoreState restores the worker's partition of every store, before the
// worker processes a record, and sets the partition's epoch. It gives up
// (returning errAbandoned) when the worker is asked to stop meanwhile.
func (w *worker[In, Out]) restoreState() error {
	r, sr, ps := w.r, w.r.state, w.st
	defer w.restored()
	if len(ps.stores) == 0 {
		w.epoch.Store(ownerEpoch(w.gen, 0))
		return nil
	}
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	go func() {
		select {
		case <-w.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	t0 := time.Now()
	parts := map[string][]int32{}
	byTopic := map[string]partStore{}
	for _, s := range ps.stores {
		parts[s.topic()] = []int32{w.tp.partition}
		byTopic[s.topic()] = s
	}
	counts := map[string]*[4]int{}
	for _, s := range ps.stores {
		counts[s.name()] = &[4]int{}
	}
	attempt := 0
	retry := func(err error) bool {
		// A broker error (a partition without a leader, a fetch refused)
		// passes: retry it until the worker stops, as the poll loop does.
		attempt++
		r.m.errors.WithLabelValues("restore").Inc()
		r.o.log.Warn("state restore failed, retrying", "partition", w.tp.partition, "attempt", attempt, "err", err)
		return w.sleep(r.cfg.SinkRetry.Backoff(attempt))
	}
	err := readChangelogs(ctx, r.o.kopts, parts, func(rec *kgo.Record) {
		s := byTopic[rec.Topic]
		out := s.restoreRecord(rec)
		counts[s.name()][out]++
		sr.m.restoreRecords.WithLabelValues(s.name()).Inc()
	}, retry)
	if err != nil {
		if w.isStopping() {
			return errAbandoned
		}
		// Only what cannot succeed by retrying: a changelog without the
		// partition, or a client that cannot be created.
		return fmt.Errorf("restore state of %s/%d: %w", w.tp.topic, w.tp.partition, err)
	}
	seen := int32(0)
	for _, s := range ps.stores {
		seen = max(seen, s.maxEpoch())
	}
	epoch := ownerEpoch(w.gen, seen)
	w.epoch.Store(epoch)
	for _, s := range ps.stores {
		s.serve(epoch)
		c := counts[s.name()]
		sr.m.fenced.WithLabelValues(s.name(), "restore").Add(float64(c[restoreFenced]))
		sr.m.fenced.WithLabelValues(s.name(), "fold").Add(float64(c[restoreFolded]))
		sr.m.restoreSkipped.WithLabelValues(s.name()).Add(float64(c[restoreUndecodable]))
		if c[restoreFenced] > 0 || c[restoreUndecodable] > 0 {
			r.o.log.Warn("state restore refused records", "store", s.name(), "partition", w.tp.partition,
				"fenced", c[restoreFenced], "undecodable", c[restoreUndecodable])
		}
	}
	r.o.log.Info("state restored", "partition", w.tp.partition, "generation", w.gen, "epoch", epoch,
		"records", sumCounts(counts), "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

func sumCounts(c map[string]*[4]int) int {
	n := 0
	for _, v := range c {
		for _, x := range v {
			n += x
		}
	}
	return n
}

// restored ends the worker's restore for the readiness (once).
func (w *worker[In, Out]) restored() {
	if w.restoring.CompareAndSwap(true, false) {
		w.r.state.restoring.Add(-1)
		for _, s := range w.st.stores {
			w.r.state.m.restoring.WithLabelValues(s.name()).Dec()
		}
	}
}

// flushState produces the changelog records of the keys the worker's
// stores changed since the last flush (see produceChangelog).
func (w *worker[In, Out]) flushState() error {
	if w.st == nil || len(w.st.stores) == 0 {
		return nil
	}
	var recs []*kgo.Record
	for _, s := range w.st.stores {
		rs, err := s.changes()
		if err != nil {
			return err
		}
		recs = append(recs, rs...)
	}
	return w.produceChangelog(recs)
}

// produceChangelog produces changelog records and waits for their
// acknowledgement, retrying failed produces until they succeed or the
// worker stops. A worker that lost its partition (abandoned, or the
// partition was lost) produces nothing and returns errAbandoned: its
// writes are fenced. A record the changelog refuses as too large is a
// fatal error: state cannot be skipped.
func (w *worker[In, Out]) produceChangelog(recs []*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	r, sr := w.r, w.r.state
	n := map[string]int{}
	for _, rec := range recs {
		n[sr.names[rec.Topic]]++
	}
	if w.lost.Load() {
		for name, k := range n {
			sr.m.fenced.WithLabelValues(name, "write").Add(float64(k))
		}
		return errAbandoned
	}
	defer w.doing(blockedChangelog)()
	for attempt := 1; ; attempt++ {
		var failed []*kgo.Record
		var ferr error
		for _, res := range r.cl.ProduceSync(w.ctx, recs...) {
			if res.Err == nil {
				continue
			}
			if tooLarge(res.Err) {
				return fmt.Errorf("state changelog %s refuses the record of key %q (%d bytes) as too large: %w", res.Record.Topic, res.Record.Key, len(res.Record.Value), res.Err)
			}
			failed = append(failed, res.Record)
			ferr = res.Err
		}
		if len(failed) == 0 {
			break
		}
		recs = failed
		r.o.log.Warn("state changelog produce failed, retrying", "partition", w.tp.partition, "attempt", attempt, "err", ferr)
		if !w.sleep(r.cfg.SinkRetry.Backoff(attempt)) {
			return errAbandoned
		}
	}
	for name, k := range n {
		sr.m.writes.WithLabelValues(name).Add(float64(k))
	}
	return nil
}
