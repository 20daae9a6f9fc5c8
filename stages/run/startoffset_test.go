package run_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// produceUntil produces one record "new-i" at a time to topic until cond
// holds (the runner processed a record): a runner starting at "latest"
// lists its start position only after it joined. It returns the records
// produced.
func produceUntil(t *testing.T, cl *kgo.Client, topic string, cond func() bool) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	testkit.WaitFor(t, 20*time.Second, "a record produced after the start to be processed", func() bool {
		recs = append(recs, produce(t, cl, topic, 1, 5, func(int) string { return fmt.Sprintf("new-%d", len(recs)) })...)
		time.Sleep(50 * time.Millisecond)
		return cond()
	})
	return recs
}

// latestNewGroup returns the one-partition config, with StartOffset
// "latest", of a group without commits on a fake cluster whose input topic
// already holds old records "old-i" (produced before any member starts),
// and a client and an admin client of that cluster.
func latestNewGroup(t *testing.T, old int) (*testkit.Kafka, run.Config, *kgo.Client, *kadm.Client) {
	t.Helper()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.StartOffset = "latest"
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, cfg.Topics[0], old, 5, func(i int) string { return fmt.Sprintf("old-%d", i) })
	return k, cfg, cl, adm
}

// startTxnEcho starts a transactional runner of cfg (transactional id
// testkit.Name(t, txnID)) whose stage calls see with each record and
// outputs to outTopic one record of the record's key whose value is its
// source offset (see checkOutputsFrom). It returns the runner's stop
// function (testkit.RunInBackground, named name).
func startTxnEcho(t *testing.T, k *testkit.Kafka, cfg run.Config, txnID, name, outTopic string, see func(msg), opts ...run.Option) (stop func() error) {
	t.Helper()
	stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
		see(m)
		return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: []byte(itoa64(m.Source.Offset))}}, nil
	}
	opts = append([]run.Option{run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond))}, opts...)
	r, err := run.NewTransactional(cfg, testkit.Name(t, txnID), decodeString, stage, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return testkit.RunInBackground(t, name, r.Run)
}

// A new group (no committed offset) of the transactional runner with
// StartOffset "latest" whose first transaction aborts (the coordinator
// refuses its TxnOffsetCommit with CONCURRENT_TRANSACTIONS) polls again from
// the position it started at, not from the log start: no record produced
// before the start is ever processed, and every record from the first one
// processed on is visible exactly once downstream (read_committed).
func TestTransactionalLatestNewGroupAbortKeepsStart(t *testing.T) {
	t.Parallel()
	const old = 20
	k, cfg, cl, adm := latestNewGroup(t, old)
	topic := cfg.Topics[0]
	outTopic := k.Topic(t, "out", 1)

	var refused atomic.Int32
	k.Fake().ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		// Not kept: only the first TxnOffsetCommit is refused.
		refused.Add(1)
		rq := req.(*kmsg.TxnOffsetCommitRequest)
		resp := rq.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, rt := range rq.Topics {
			st := kmsg.NewTxnOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, p := range rt.Partitions {
				sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				sp.Partition = p.Partition
				sp.ErrorCode = kerr.ConcurrentTransactions.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	var calls atomic.Int32
	reg := prometheus.NewRegistry()
	stop := startTxnEcho(t, k, cfg, "txn", "txn runner", outTopic, func(msg) { calls.Add(1) }, run.WithRegisterer(reg))
	produceUntil(t, cl, topic, func() bool { return calls.Load() > 0 })
	produce(t, cl, topic, 10, 5, func(i int) string { return fmt.Sprintf("more-%d", i) })
	waitCommittedAtEnd(t, adm, cfg.Group, topic, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if refused.Load() != 1 {
		t.Fatalf("%d TxnOffsetCommit refused, want 1 (the first transaction must abort)", refused.Load())
	}
	if got := testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "commit"); got != 1 {
		t.Errorf("sluice_runtime_errors_total{kind=commit} = %v, want 1 (one aborted transaction)", got)
	}
	end := testkit.EndOffsets(t, adm, topic)[0]
	seen, first := outputOffsets(t, k, outTopic, end)
	if first < old {
		t.Fatalf("source offset %d processed: a record produced before the start (offsets 0..%d) reached the output topic; outputs per source offset %v", first, old-1, seen)
	}
	checkOnceEach(t, seen, first, end)
}

// The batch runner's analogue: a new group with StartOffset "latest" whose
// first stage call asks for a retry and whose first sink write fails
// (transient) before anything is committed retries in place: no record
// produced before the start is ever processed or written, and every record
// from the first one processed on is written exactly once.
func TestLatestNewGroupFailedBatchKeepsStart(t *testing.T) {
	t.Parallel()
	const old = 20
	k, cfg, cl, adm := latestNewGroup(t, old)
	topic := cfg.Topics[0]

	var calls atomic.Int32
	var mu sync.Mutex
	var processed []int64 // source offsets the stage saw
	stage := func(_ context.Context, m msg) ([]msg, error) {
		mu.Lock()
		processed = append(processed, m.Source.Offset)
		mu.Unlock()
		if calls.Add(1) == 1 {
			return nil, stages.Retry(errors.New("first call fails"))
		}
		return []msg{m}, nil
	}
	sink := memsink.New(memsink.WithFailure(func(_ []msg, write int) error {
		if write == 1 {
			return errors.New("first write fails")
		}
		return nil
	}))
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, stage, sink, run.WithRegisterer(reg))
	recs := produceUntil(t, cl, topic, func() bool { return calls.Load() > 0 })
	recs = append(recs, produce(t, cl, topic, 10, 5, func(i int) string { return fmt.Sprintf("more-%d", i) })...)
	waitCommittedAtEnd(t, adm, cfg.Group, topic, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := testkit.Metric(t, reg, "sluice_retries_total", "kind", "sink"); got < 1 {
		t.Errorf("sluice_retries_total{kind=sink} = %v, want ≥ 1 (the first write failed)", got)
	}
	if got := testkit.Metric(t, reg, "sluice_retries_total", "kind", "stage"); got != 1 {
		t.Errorf("sluice_retries_total{kind=stage} = %v, want 1", got)
	}
	mu.Lock()
	for _, off := range processed {
		if off < old {
			t.Errorf("the stage saw offset %d, produced before the start", off)
		}
	}
	mu.Unlock()
	items := sink.Items()
	if len(items) == 0 {
		t.Fatal("nothing written")
	}
	first := items[0].Source.Offset
	if first < old {
		t.Fatalf("first record written at offset %d (%s): a record produced before the start was written", first, items[0].Value)
	}
	checkLanded(t, items, recs[first-old:], nil)
	if want := len(recs) - int(first-old); len(items) != want {
		t.Errorf("wrote %d records, want %d (offsets %d..%d once each)", len(items), want, first, old+len(recs)-1)
	}
}

// firstOffset records the first source offset a stage saw (-1 until then).
type firstOffset struct {
	mu  sync.Mutex
	off int64
}

func newFirstOffset() *firstOffset { return &firstOffset{off: -1} }

func (f *firstOffset) see(off int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.off < 0 {
		f.off = off
	}
}

func (f *firstOffset) get() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.off
}

// since returns the records of recs at or after offset from (one partition).
func since(recs []*kgo.Record, from int64) []*kgo.Record {
	var out []*kgo.Record
	for _, r := range recs {
		if r.Offset >= from {
			out = append(out, r)
		}
	}
	return out
}

// startSinkDown starts a batch runner of cfg whose sink fails every write,
// so that it never commits a record it processed. It returns the first
// source offset its stage saw, its sink and its stop function.
func startSinkDown(t *testing.T, k *testkit.Kafka, cfg run.Config) (*firstOffset, *memsink.Sink[msg], func() error) {
	t.Helper()
	seen := newFirstOffset()
	stage := func(_ context.Context, m msg) ([]msg, error) {
		seen.see(m.Source.Offset)
		return []msg{m}, nil
	}
	down := memsink.New(memsink.WithFailure(func([]msg, int) error { return errors.New("sink down") }))
	_, stop := start(t, k, cfg, stage, down)
	return seen, down, stop
}

// A new group with StartOffset "latest" whose first member A stops before
// its first commit (its sink is down all along, so it never commits a
// record) does not lose the records produced after A started: A committed
// its start for the group when it was assigned the partition, and member B
// of the same group, started later with a working sink, writes exactly the
// records from A's start on, none produced before it and none missing,
// although the log end moved on meanwhile.
func TestLatestNewGroupStartSurvivesOwnerStop(t *testing.T) {
	t.Parallel()
	const old = 20
	k, cfg, cl, adm := latestNewGroup(t, old)
	topic := cfg.Topics[0]

	// Member A: every write fails.
	seenA, down, stopA := startSinkDown(t, k, cfg)
	recs := produceUntil(t, cl, topic, func() bool { return seenA.get() >= 0 })
	recs = append(recs, produce(t, cl, topic, 10, 5, func(i int) string { return fmt.Sprintf("during-a-%d", i) })...)
	startA := seenA.get()
	if startA < old {
		t.Fatalf("member A processed offset %d, produced before it started (offsets 0..%d)", startA, old-1)
	}
	if got, ok := testkit.Committed(t, adm, cfg.Group, topic)[0]; !ok || got != startA {
		t.Errorf("while A runs without committing a record, the group's commit is %d (present %v), want A's start %d", got, ok, startA)
	}
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	if n := len(down.Items()); n != 0 {
		t.Fatalf("member A's sink stored %d records, want none (it is down)", n)
	}
	recs = append(recs, produce(t, cl, topic, 10, 5, func(i int) string { return fmt.Sprintf("between-%d", i) })...)

	// Member B, same group, working sink.
	sink := memsink.New[msg]()
	_, stopB := start(t, k, cfg, passthrough, sink)
	recs = append(recs, produceUntil(t, cl, topic, func() bool { return sink.Len() > 0 })...)
	recs = append(recs, produce(t, cl, topic, 10, 5, func(i int) string { return fmt.Sprintf("during-b-%d", i) })...)
	waitCommittedAtEnd(t, adm, cfg.Group, topic, 30*time.Second)
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	items := sink.Items()
	if first := items[0].Source.Offset; first != startA {
		t.Errorf("member B wrote from offset %d (%s), want A's start %d: offsets %d..%d were never processed", first, items[0].Value, startA, startA, first-1)
	}
	for _, m := range items {
		if m.Source.Offset < startA {
			t.Fatalf("member B wrote offset %d (%s), produced before the group started at %d", m.Source.Offset, m.Value, startA)
		}
	}
	want := since(recs, startA)
	checkLanded(t, items, want, nil)
	if len(items) != len(want) {
		t.Errorf("member B wrote %d records, want %d (offsets %d..%d once each)", len(items), len(want), startA, want[len(want)-1].Offset)
	}
}

// runTxnUntilFatal runs a transactional runner of cfg whose stage records
// the first source offset it sees and fails fatally on it (a crash before
// the first transaction commits); it returns that offset once Run returned
// the stage's error. Records are produced to topic until the stage saw one
// (see produceUntil), and returned.
func runTxnUntilFatal(t *testing.T, k *testkit.Kafka, cfg run.Config, cl *kgo.Client) (first int64, recs []*kgo.Record) {
	t.Helper()
	seen := newFirstOffset()
	crash := errors.New("simulated crash")
	stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
		seen.see(m.Source.Offset)
		return nil, stages.Fatal(crash)
	}
	r, err := run.NewTransactional(cfg, testkit.Name(t, "txn-a"), decodeString, stage,
		run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	recs = produceUntil(t, cl, cfg.Topics[0], func() bool { return seen.get() >= 0 })
	select {
	case err := <-errc:
		if !errors.Is(err, crash) {
			t.Fatalf("member A's Run returned %v, want the simulated crash", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("member A did not stop on its stage's fatal error")
	}
	return seen.get(), recs
}

// The transactional runner's analogue: a new group with StartOffset
// "latest" whose first member A crashes (a fatal stage error, its first
// transaction aborted) before any commit of its own leaves member B of the
// same group A's start: B's outputs (read_committed) are exactly those of
// the records from A's start on, once each, although the log end moved on
// meanwhile.
func TestTransactionalLatestNewGroupStartSurvivesCrash(t *testing.T) {
	t.Parallel()
	const old = 20
	k, cfg, cl, adm := latestNewGroup(t, old)
	topic := cfg.Topics[0]
	outTopic := k.Topic(t, "out", 1)

	startA, _ := runTxnUntilFatal(t, k, cfg, cl)
	if startA < old {
		t.Fatalf("member A processed offset %d, produced before it started (offsets 0..%d)", startA, old-1)
	}
	if got, ok := testkit.Committed(t, adm, cfg.Group, topic)[0]; !ok || got != startA {
		t.Errorf("after A crashed without committing a transaction, the group's commit is %d (present %v), want A's start %d", got, ok, startA)
	}
	produce(t, cl, topic, 10, 5, func(i int) string { return fmt.Sprintf("between-%d", i) })

	var calls atomic.Int32
	stop := startTxnEcho(t, k, cfg, "txn-b", "txn runner B", outTopic, func(msg) { calls.Add(1) })
	produceUntil(t, cl, topic, func() bool { return calls.Load() > 0 })
	produce(t, cl, topic, 10, 5, func(i int) string { return fmt.Sprintf("during-b-%d", i) })
	waitCommittedAtEnd(t, adm, cfg.Group, topic, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkOutputsFrom(t, k, topic, outTopic, startA)
}

// outputOffsets reads outTopic (read_committed), whose record values are
// source offsets (see startTxnEcho), and returns how many times each source
// offset is visible and the lowest one (end when there is none).
func outputOffsets(t *testing.T, k *testkit.Kafka, outTopic string, end int64) (seen map[int64]int, first int64) {
	t.Helper()
	seen, first = map[int64]int{}, end
	for _, rec := range k.ReadTopic(t, outTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted())) {
		off, err := strconv.ParseInt(string(rec.Value), 10, 64)
		if err != nil {
			t.Fatalf("output value %q: %v", rec.Value, err)
		}
		seen[off]++
		first = min(first, off)
	}
	return seen, first
}

// checkOnceEach checks that seen (see outputOffsets) holds exactly the
// source offsets from..end-1, once each.
func checkOnceEach(t *testing.T, seen map[int64]int, from, end int64) {
	t.Helper()
	for off := from; off < end; off++ {
		if seen[off] != 1 {
			t.Errorf("output of source offset %d visible %d times, want once", off, seen[off])
		}
	}
	if len(seen) != int(end-from) {
		t.Errorf("outputs of %d source offsets, want %d (offsets %d..%d)", len(seen), end-from, from, end-1)
	}
}

// checkOutputsFrom checks that outTopic (read_committed) holds the outputs
// of exactly the source offsets from..end-1 of topic's partition 0, once
// each: their values are the source offsets.
func checkOutputsFrom(t *testing.T, k *testkit.Kafka, topic, outTopic string, from int64) {
	t.Helper()
	end := testkit.EndOffsets(t, k.Admin(t), topic)[0]
	seen, first := outputOffsets(t, k, outTopic, end)
	if first != from {
		t.Errorf("outputs start at source offset %d, want %d: offsets %d..%d were never processed (or processed though produced before the start)", first, from, min(first, from), max(first, from)-1)
	}
	checkOnceEach(t, seen, from, end)
}

// A group that already has a commit is left alone by StartOffset "latest"
// (both runners): a member assigned the partition starts at the commit,
// below the log end, and the commit is not overwritten with the end.
func TestLatestKeepsExistingCommit(t *testing.T) {
	t.Parallel()
	const old, committed = 20, 5
	setup := func(t *testing.T) (*testkit.Kafka, run.Config, *kgo.Client) {
		k := testkit.NewKafka(t, testkit.ForceFake())
		cfg := baseConfig(t, k, 1)
		cfg.StartOffset = "latest"
		cl, adm := k.Client(t), k.Admin(t)
		produce(t, cl, cfg.Topics[0], old, 5, nil)
		var os kadm.Offsets
		os.AddOffset(cfg.Topics[0], 0, committed, -1)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := adm.CommitAllOffsets(ctx, cfg.Group, os); err != nil {
			t.Fatalf("commit offset %d for the group: %v", committed, err)
		}
		return k, cfg, cl
	}
	check := func(t *testing.T, k *testkit.Kafka, cfg run.Config, first int64) {
		t.Helper()
		if first != committed {
			t.Errorf("the member started at offset %d, want the group's commit %d", first, committed)
		}
		if got, ok := testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])[0]; !ok || got != committed {
			t.Errorf("the group's commit is %d (present %v), want %d untouched", got, ok, committed)
		}
	}
	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		k, cfg, _ := setup(t)
		seen, _, stop := startSinkDown(t, k, cfg)
		testkit.WaitFor(t, 20*time.Second, "the stage to see a record", func() bool { return seen.get() >= 0 })
		check(t, k, cfg, seen.get())
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("transactional", func(t *testing.T) {
		t.Parallel()
		k, cfg, cl := setup(t)
		first, _ := runTxnUntilFatal(t, k, cfg, cl)
		check(t, k, cfg, first)
	})
}

// refuseOffsetCommits makes the cluster answer the next n OffsetCommit
// requests with code on every partition (as to a member whose generation
// is stale) and returns the count of requests refused so far.
func refuseOffsetCommits(k *testkit.Kafka, n int32, code int16) *atomic.Int32 {
	var refused atomic.Int32
	k.Fake().ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if refused.Load() >= n {
			return nil, nil, false
		}
		if refused.Add(1) < n {
			k.Fake().KeepControl()
		}
		return offsetCommitRefusal(req, code), nil, true
	})
	return &refused
}

// offsetCommitRefusal answers an OffsetCommit request with code for every
// partition it names.
func offsetCommitRefusal(req kmsg.Request, code int16) *kmsg.OffsetCommitResponse {
	rq := req.(*kmsg.OffsetCommitRequest)
	resp := rq.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, rt := range rq.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, p := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition = p.Partition
			sp.ErrorCode = code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// When the commit of the "latest" start is refused, no record of the
// partition is processed from that unrecorded start: the member rejoins
// (kgo rejoins at once on ILLEGAL_GENERATION, what a member whose
// generation went stale gets; another error ends the group session, the
// partitions are lost and the member rejoins after a backoff), resolves and
// commits the start again and processes from there, every record once.
func TestLatestStartCommitRefusedRejoins(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		code int16
		txn  bool
	}{
		{"stale generation", kerr.IllegalGeneration.Code, false},
		{"session error", kerr.OffsetMetadataTooLarge.Code, false},
		{"transactional stale generation", kerr.IllegalGeneration.Code, true},
		{"transactional session error", kerr.OffsetMetadataTooLarge.Code, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const old = 20
			k, cfg, cl, adm := latestNewGroup(t, old)
			topic := cfg.Topics[0]
			refused := refuseOffsetCommits(k, 1, tc.code)

			// committedAtFirst: the group's commit of partition 0 when
			// the stage saw its first record (fetched on the stage's
			// goroutine, so without testkit.Committed's t.Fatalf).
			type commit struct {
				at  int64
				err error
			}
			committedAtFirst := make(chan commit, 1)
			seen := newFirstOffset()
			see := func(m msg) {
				if seen.get() < 0 {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					c := commit{at: -1}
					resp, err := adm.FetchOffsets(ctx, cfg.Group)
					if err == nil {
						if o, ok := resp.Lookup(topic, 0); ok {
							c.at, c.err = o.At, o.Err
						}
					}
					if err != nil {
						c.err = err
					}
					committedAtFirst <- c
				}
				seen.see(m.Source.Offset)
			}
			var (
				recs  []*kgo.Record
				stop  func() error
				sink  *memsink.Sink[msg]
				outTo string
			)
			if tc.txn {
				outTo = k.Topic(t, "out", 1)
				stop = startTxnEcho(t, k, cfg, "txn", "txn runner", outTo, see)
				recs = produceUntil(t, cl, topic, func() bool { return seen.get() >= 0 })
			} else {
				sink = memsink.New[msg]()
				stage := func(_ context.Context, m msg) ([]msg, error) {
					see(m)
					return []msg{m}, nil
				}
				_, stop = start(t, k, cfg, stage, sink)
				recs = produceUntil(t, cl, topic, func() bool { return sink.Len() > 0 })
			}
			recs = append(recs, produce(t, cl, topic, 10, 5, func(i int) string { return fmt.Sprintf("more-%d", i) })...)
			waitCommittedAtEnd(t, adm, cfg.Group, topic, 30*time.Second)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if refused.Load() != 1 {
				t.Fatalf("%d OffsetCommit refused, want 1 (the start's commit)", refused.Load())
			}
			first := seen.get()
			if first < old {
				t.Fatalf("the stage first saw offset %d, produced before the start (offsets 0..%d)", first, old-1)
			}
			if c := <-committedAtFirst; c.err != nil || c.at != first {
				t.Errorf("when the first record (offset %d) was processed, the group's commit was %d (-1: none; error %v), want %d", first, c.at, c.err, first)
			}
			if tc.txn {
				checkOutputsFrom(t, k, topic, outTo, first)
				return
			}
			items := sink.Items()
			if items[0].Source.Offset != first {
				t.Errorf("first record written at offset %d, want %d (the first the stage saw)", items[0].Source.Offset, first)
			}
			want := since(recs, first)
			checkLanded(t, items, want, nil)
			if len(items) != len(want) {
				t.Errorf("wrote %d records, want %d (offsets %d..%d once each)", len(items), len(want), first, want[len(want)-1].Offset)
			}
		})
	}
}
