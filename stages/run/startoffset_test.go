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

// A new group (no committed offset) of the transactional runner with
// StartOffset "latest" whose first transaction aborts (the coordinator
// refuses its TxnOffsetCommit with CONCURRENT_TRANSACTIONS) polls again from
// the position it started at, not from the log start: no record produced
// before the start is ever processed, and every record from the first one
// processed on is visible exactly once downstream (read_committed).
func TestTransactionalLatestNewGroupAbortKeepsStart(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.StartOffset = "latest"
	topic := cfg.Topics[0]
	outTopic := k.Topic(t, "out", 1)
	cl, adm := k.Client(t), k.Admin(t)
	const old = 20
	produce(t, cl, topic, old, 5, func(i int) string { return fmt.Sprintf("old-%d", i) })

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
	stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
		calls.Add(1)
		return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: []byte(itoa64(m.Source.Offset))}}, nil
	}
	reg := prometheus.NewRegistry()
	r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), decodeString, stage, run.WithRegisterer(reg),
		run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkit.RunInBackground(t, "txn runner", r.Run)
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
	seen := map[int64]int{}
	first := end
	for _, rec := range k.ReadTopic(t, outTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted())) {
		off, err := strconv.ParseInt(string(rec.Value), 10, 64)
		if err != nil {
			t.Fatalf("output value %q: %v", rec.Value, err)
		}
		seen[off]++
		first = min(first, off)
	}
	if first < old {
		t.Fatalf("source offset %d processed: a record produced before the start (offsets 0..%d) reached the output topic; outputs per source offset %v", first, old-1, seen)
	}
	for off := first; off < end; off++ {
		if seen[off] != 1 {
			t.Errorf("output of source offset %d visible %d times, want once", off, seen[off])
		}
	}
	if len(seen) != int(end-first) {
		t.Errorf("outputs of %d source offsets, want %d (offsets %d..%d)", len(seen), end-first, first, end-1)
	}
}

// The batch runner's analogue: a new group with StartOffset "latest" whose
// first stage call asks for a retry and whose first sink write fails
// (transient) before anything is committed retries in place: no record
// produced before the start is ever processed or written, and every record
// from the first one processed on is written exactly once.
func TestLatestNewGroupFailedBatchKeepsStart(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.StartOffset = "latest"
	topic := cfg.Topics[0]
	cl, adm := k.Client(t), k.Admin(t)
	const old = 20
	produce(t, cl, topic, old, 5, func(i int) string { return fmt.Sprintf("old-%d", i) })

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
