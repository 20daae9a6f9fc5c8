package run_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

func baseConfig(t *testing.T, k *testkit.Kafka, partitions int32) run.Config {
	t.Helper()
	return run.Config{
		Name:            "test",
		Group:           testkit.Name(t, "g"),
		Topics:          []string{k.Topic(t, "in", partitions)},
		DLQTopic:        k.Topic(t, "dlq", 1),
		BatchMaxRecords: 50,
		BatchLinger:     10 * time.Millisecond,
		CommitInterval:  200 * time.Millisecond,
		Retry:           run.RetryPolicy{MaxAttempts: 3, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		SinkRetry:       run.RetryPolicy{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond},
	}
}

// (a) A rebalance mid-batch between two members loses nothing, keeps each
// partition in offset order, and duplicates only records that were not
// committed when the partition moved.
func TestRebalanceMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 6)
	cl := k.Client(t)
	adm := k.Admin(t)
	const n = 6000
	produce(t, cl, cfg.Topics[0], n, 97, nil)

	// 5 ms per record: each partition takes ~5 s, long enough to rebalance mid-way.
	slow := func(batch []msg, _ int) error {
		time.Sleep(time.Duration(len(batch)) * 5 * time.Millisecond)
		return nil
	}
	sinkA := memsink.New(memsink.WithFailure(slow))
	sinkB := memsink.New(memsink.WithFailure(slow))

	var revMu sync.Mutex
	committedAtRevoke := map[int32]int64{}
	revokeHook := run.WithRevokeHook(func(ctx context.Context, revoked map[string][]int32) {
		c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])
		revMu.Lock()
		defer revMu.Unlock()
		for _, p := range revoked[cfg.Topics[0]] {
			committedAtRevoke[p] = c[p]
		}
	})
	_, stopA := start(t, k, cfg, passthrough, sinkA, revokeHook)
	testkit.WaitFor(t, 60*time.Second, "member A to write 600 records", func() bool { return sinkA.Len() >= 600 })
	_, stopB := start(t, k, cfg, passthrough, sinkB)
	testkit.WaitFor(t, 120*time.Second, "both members to land every record", func() bool {
		seen := map[coord]bool{}
		for _, s := range []*memsink.Sink[msg]{sinkA, sinkB} {
			for _, m := range s.Items() {
				seen[coord{m.Source.Partition, m.Source.Offset}] = true
			}
		}
		return len(seen) == n
	})
	if err := stopA(); err != nil {
		t.Fatalf("member A: %v", err)
	}
	if err := stopB(); err != nil {
		t.Fatalf("member B: %v", err)
	}

	if sinkB.Len() == 0 {
		t.Fatalf("member B received nothing: the group did not split the partitions")
	}
	revMu.Lock()
	defer revMu.Unlock()
	if len(committedAtRevoke) == 0 {
		t.Fatalf("member A never had a partition revoked")
	}
	count := map[coord]int{}
	for _, s := range []*memsink.Sink[msg]{sinkA, sinkB} {
		last := map[int32]int64{}
		for _, m := range s.Items() {
			c := coord{m.Source.Partition, m.Source.Offset}
			count[c]++
			if prev, ok := last[c.Partition]; ok && c.Offset <= prev {
				t.Fatalf("partition %d out of order in one member: offset %d after %d", c.Partition, c.Offset, prev)
			}
			last[c.Partition] = c.Offset
		}
	}
	dups := 0
	for c, times := range count {
		if times > 1 {
			dups++
			at, moved := committedAtRevoke[c.Partition]
			if !moved || c.Offset < at {
				t.Errorf("record %d/%d processed %d times although it was committed (offset %d) before the rebalance", c.Partition, c.Offset, times, at)
			}
		}
	}
	t.Logf("records=%d memberA=%d memberB=%d duplicates=%d revoked=%v", n, sinkA.Len(), sinkB.Len(), dups, committedAtRevoke)
	ends := testkit.EndOffsets(t, adm, cfg.Topics[0])
	got := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])
	for p, e := range ends {
		if got[p] != e {
			t.Errorf("partition %d: committed %d, end %d", p, got[p], e)
		}
	}
}

// (b) A poison record goes to the DLQ with every header and its partition
// keeps flowing.
func TestPoisonRecordDeadLettered(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 3)
	cl := k.Client(t)
	const n = 300
	recs := produce(t, cl, cfg.Topics[0], n, 10, func(i int) string {
		if i == 10 || i == 150 {
			return "poison-" + strconv.Itoa(i)
		}
		return fmt.Sprintf("v-%d", i)
	})
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		if len(m.Value) > 6 && m.Value[:6] == "poison" {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "test.poison", errors.New("value is poison"))
		}
		return []msg{m}, nil
	}
	sink := memsink.New[msg]()
	before := time.Now().Add(-time.Second).UTC().Truncate(time.Second)
	_, stop := start(t, k, cfg, stage, sink)
	testkit.WaitFor(t, 60*time.Second, "valid records", func() bool { return sink.Len() == n-2 })
	stopWhenCommitted(t, k, cfg, n, 30*time.Second, stop)
	dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
	if len(dlq) != 2 {
		t.Fatalf("DLQ has %d records, want 2", len(dlq))
	}
	byValue := map[string]*kgo.Record{}
	for _, r := range recs {
		byValue[string(r.Value)] = r
	}
	for _, d := range dlq {
		orig := byValue[string(d.Value)]
		if orig == nil || string(orig.Key) != string(d.Key) {
			t.Fatalf("DLQ record %q/%q does not keep the original key and value", d.Key, d.Value)
		}
		want := map[string]string{
			stages.HeaderReason:          "sanity_fail",
			stages.HeaderRule:            "test.poison",
			stages.HeaderError:           "value is poison",
			stages.HeaderStage:           "test",
			stages.HeaderSourceTopic:     cfg.Topics[0],
			stages.HeaderSourcePartition: strconv.Itoa(int(orig.Partition)),
			stages.HeaderSourceOffset:    strconv.FormatInt(orig.Offset, 10),
			stages.HeaderAttempts:        "1",
		}
		for h, v := range want {
			if got, ok := testkit.Header(d, h); !ok || got != v {
				t.Errorf("header %s = %q (present %t), want %q", h, got, ok, v)
			}
		}
		at, _ := testkit.Header(d, stages.HeaderFailedAt)
		ts, err := time.Parse(time.RFC3339, at)
		if err != nil || ts.Before(before) || ts.After(time.Now().Add(time.Second)) {
			t.Errorf("dlq.failed_at = %q (%v), want RFC 3339 now", at, err)
		}
	}
	// Records after the poison ones in the same partitions were written.
	for _, m := range sink.Items() {
		if m.Value == "v-299" {
			return
		}
	}
	t.Fatalf("last record missing from the sink")
}

// (c) A sink that fails transiently causes no commit and a redelivery of the
// same batch, then succeeds.
func TestTransientSinkFailureRetriesWithoutCommit(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cl, adm := k.Client(t), k.Admin(t)
	const n = 40
	produce(t, cl, cfg.Topics[0], n, 5, nil)

	var commitsWhileFailing []map[int32]int64
	var firstBatch []string
	sink := memsink.New(memsink.WithFailure(func(batch []msg, write int) error {
		if write <= 3 {
			vals := make([]string, len(batch))
			for i, m := range batch {
				vals[i] = m.Value
			}
			if write == 1 {
				firstBatch = vals
			} else if fmt.Sprint(vals) != fmt.Sprint(firstBatch) {
				t.Errorf("write %d got a different batch than the failed one", write)
			}
			commitsWhileFailing = append(commitsWhileFailing, testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]))
			return errors.New("connection reset by peer")
		}
		return nil
	}))
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, passthrough, sink, run.WithRegisterer(reg))
	testkit.WaitFor(t, 30*time.Second, "all records written", func() bool { return sink.Len() == n })
	testkit.WaitFor(t, 30*time.Second, "commit", func() bool { return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == n })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for i, c := range commitsWhileFailing {
		if len(c) != 0 {
			t.Errorf("offsets committed during failure %d: %v", i+1, c)
		}
	}
	if got := testkit.Metric(t, reg, "sluice_retries_total"); got != 3 {
		t.Errorf("sluice_retries_total = %v, want 3", got)
	}
	if got := testkit.Metric(t, reg, "sluice_dlq_records_total"); got != 0 {
		t.Errorf("transient failures dead-lettered %v records", got)
	}
	seen := map[string]int{}
	for _, m := range sink.Items() {
		seen[m.Value]++
	}
	if len(seen) != n {
		t.Fatalf("sink has %d distinct records, want %d", len(seen), n)
	}
}

// (c') With kfake's fault injection: while the broker rejects DLQ produce
// requests, the poison record's offset is not committed; once the DLQ
// accepts, everything commits.
func TestDLQProduceFailureHoldsCommit(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, cfg.Topics[0], 5, 1, func(i int) string {
		if i == 0 {
			return "poison"
		}
		return "ok"
	})
	var failures atomic.Int32
	k.Fake().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		// Only the runner produces from here on, and only to the DLQ (newer
		// produce versions name topics by ID, so the name is not checked).
		if failures.Load() >= 2 {
			return nil, nil, false
		}
		failures.Add(1)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range pr.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = tp.Topic
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = 7 // REQUEST_TIMED_OUT: retriable; kgo retries, then gives up per record timeout
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		if m.Value == "poison" {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "r", errors.New("bad"))
		}
		return []msg{m}, nil
	}
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, sink, run.WithKafkaOpts(kgo.RecordDeliveryTimeout(time.Second)))
	testkit.WaitFor(t, 30*time.Second, "DLQ produce to be rejected twice", func() bool { return failures.Load() >= 2 })
	if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); len(c) != 0 {
		t.Fatalf("committed %v while the DLQ record was not acknowledged", c)
	}
	testkit.WaitFor(t, 30*time.Second, "commit after the DLQ accepted", func() bool { return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == 5 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := len(k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())); got < 1 {
		t.Fatalf("DLQ has %d records", got)
	}
	if sink.Len() != 4 {
		t.Fatalf("sink has %d records, want 4", sink.Len())
	}
}

// (d) Graceful shutdown finishes the batch in flight and commits exactly what
// was written.
func TestGracefulShutdownCommitsWhatWasDone(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.BatchMaxRecords = 20
	cfg.CommitInterval = time.Hour // only the shutdown commit may commit
	cl, adm := k.Client(t), k.Admin(t)
	const n = 1000
	produce(t, cl, cfg.Topics[0], n, 7, nil)
	writing := make(chan struct{}, 1)
	sink := memsink.New(memsink.WithFailure(func(batch []msg, write int) error {
		if write == 3 {
			writing <- struct{}{}
		}
		time.Sleep(100 * time.Millisecond)
		return nil
	}))
	_, stop := start(t, k, cfg, passthrough, sink)
	select {
	case <-writing:
	case <-time.After(60 * time.Second):
		t.Fatal("sink never reached its third write")
	}
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after a graceful stop", err)
	}
	written := sink.Len()
	if written < 60 || written >= n {
		t.Fatalf("written %d records; want the in-flight batch finished and the rest left", written)
	}
	if got := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0]; got != int64(written) {
		t.Fatalf("committed offset %d, want %d (every written record, nothing more)", got, written)
	}
}

// (e) A paused partition (a stage asking to retry later) does not block the
// others.
func TestPausedPartitionDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 3)
	cfg.Retry = run.RetryPolicy{MaxAttempts: 1000, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond}
	cl := k.Client(t)
	recs := produce(t, cl, cfg.Topics[0], 300, 30, nil)
	perPartition := map[int32]int{}
	for _, r := range recs {
		perPartition[r.Partition]++
	}
	var blocked atomic.Bool
	blocked.Store(true)
	var blockedPartition int32 = recs[0].Partition
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		if m.Source.Partition == blockedPartition && blocked.Load() {
			return nil, stages.RetryAfter(200*time.Millisecond, errors.New("rate limited"))
		}
		return []msg{m}, nil
	}
	sink := memsink.New[msg]()
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, stage, sink, run.WithRegisterer(reg))
	others := 300 - perPartition[blockedPartition]
	testkit.WaitFor(t, 60*time.Second, "the other partitions to drain", func() bool { return sink.Len() == others })
	for _, m := range sink.Items() {
		if m.Source.Partition == blockedPartition {
			t.Fatalf("blocked partition produced output")
		}
	}
	if got := testkit.Metric(t, reg, "sluice_paused_partitions"); got != 1 {
		t.Fatalf("sluice_paused_partitions = %v, want 1", got)
	}
	blocked.Store(false)
	testkit.WaitFor(t, 60*time.Second, "the blocked partition to drain", func() bool { return sink.Len() == 300 })
	testkit.WaitFor(t, 10*time.Second, "resume", func() bool { return testkit.Metric(t, reg, "sluice_paused_partitions") == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// (f) Retries give up after the configured attempts into the DLQ with
// retries_exhausted, and the partition continues.
func TestRetriesExhaustedDeadLetters(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, cfg.Topics[0], 10, 1, func(i int) string {
		if i == 4 {
			return "flaky"
		}
		return fmt.Sprintf("v-%d", i)
	})
	var calls atomic.Int32
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		if m.Value == "flaky" {
			calls.Add(1)
			return nil, stages.Retry(errors.New("upstream 504"))
		}
		return []msg{m}, nil
	}
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, sink)
	testkit.WaitFor(t, 30*time.Second, "the other records", func() bool { return sink.Len() == 9 })
	testkit.WaitFor(t, 30*time.Second, "commit", func() bool { return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == 10 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != 3 {
		t.Fatalf("stage called %d times for the failing record, want 3", got)
	}
	dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
	if len(dlq) != 1 {
		t.Fatalf("DLQ has %d records, want 1", len(dlq))
	}
	for h, want := range map[string]string{stages.HeaderReason: "retries_exhausted", stages.HeaderAttempts: "3", stages.HeaderError: "upstream 504", stages.HeaderSourceOffset: "4"} {
		if got, _ := testkit.Header(dlq[0], h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
}

// A fatal stage error stops the runner without committing the record.
func TestFatalStopsWithoutCommit(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.BatchMaxRecords = 1
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, cfg.Topics[0], 10, 1, func(i int) string { return strconv.Itoa(i) })
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		if m.Value == "6" {
			return nil, stages.Fatal(errors.New("schema mismatch"))
		}
		return []msg{m}, nil
	}
	sink := memsink.New[msg]()
	r, err := run.New(cfg, decodeString, stage, stages.Sink[msg](sink), run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = r.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "schema mismatch") || ctx.Err() != nil {
		t.Fatalf("Run = %v, want the fatal error before the deadline", err)
	}
	if got := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0]; got != 6 {
		t.Fatalf("committed %d, want 6 (everything before the fatal record)", got)
	}
	if sink.Len() != 6 {
		t.Fatalf("sink has %d records, want 6", sink.Len())
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  run.Config
		ok   bool
	}{
		{"valid", run.Config{Name: "p", Topics: []string{"a"}, DLQTopic: "d"}, true},
		{"no name", run.Config{Topics: []string{"a"}, DLQTopic: "d"}, false},
		{"no topics", run.Config{Name: "p", DLQTopic: "d"}, false},
		{"no dlq", run.Config{Name: "p", Topics: []string{"a"}}, false},
		{"dlq is input", run.Config{Name: "p", Topics: []string{"a"}, DLQTopic: "a"}, false},
		{"bad start", run.Config{Name: "p", Topics: []string{"a"}, DLQTopic: "d", StartOffset: "middle"}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v", tc.name, err)
		}
	}
}

// A dead letter the DLQ topic refuses as too large does not hang its
// partition: it is replaced by a stub that keeps the dlq.* headers and says
// what was left out (dlq.value_omitted), and the partition moves on. A
// huge error message is cut in dlq.error so that the dead letter of a small
// record still fits.
func TestDLQTooLargeBecomesStub(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	maxBytes := "16384"
	cfg.DLQTopic = k.Topic(t, "dlq.small", 1, map[string]*string{"max.message.bytes": &maxBytes})
	cl, adm := k.Client(t), k.Admin(t)
	big := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32()) // incompressible: the broker sees its size
	}
	recs := []*kgo.Record{
		{Topic: cfg.Topics[0], Key: []byte("k"), Value: append([]byte("poison-big:"), big...), Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t1")}}},
		{Topic: cfg.Topics[0], Key: []byte("k"), Value: []byte("poison-small")},
		{Topic: cfg.Topics[0], Key: []byte("k"), Value: []byte("ok")},
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	stage := func(_ context.Context, m msg) ([]msg, error) {
		if strings.HasPrefix(m.Value, "poison") {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "test.huge", errors.New("bad input "+strings.Repeat("x", 10_000)))
		}
		return []msg{m}, nil
	}
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, sink)
	testkit.WaitFor(t, 30*time.Second, "commit past both dead letters", func() bool {
		return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == 3
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if sink.Len() != 1 {
		t.Fatalf("sink has %d records, want 1", sink.Len())
	}
	dl := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
	if len(dl) != 2 {
		t.Fatalf("DLQ has %d records, want 2", len(dl))
	}
	for i, r := range dl {
		if e, _ := testkit.Header(r, stages.HeaderError); len(e) > 4096 || !strings.Contains(e, "more bytes cut") {
			t.Errorf("dead letter %d: dlq.error of %d bytes (%.40q…), want it cut to at most 4096", i, len(e), e)
		}
		if off, _ := testkit.Header(r, stages.HeaderSourceOffset); off != strconv.Itoa(i) {
			t.Errorf("dead letter %d: dlq.source.offset %q", i, off)
		}
		if reason, _ := testkit.Header(r, stages.HeaderReason); reason != string(stages.ReasonSanityFail) {
			t.Errorf("dead letter %d: dlq.reason %q", i, reason)
		}
	}
	stub, full := dl[0], dl[1]
	omitted, ok := testkit.Header(stub, stages.HeaderValueOmitted)
	if !ok || len(stub.Value) != 0 || !strings.Contains(omitted, fmt.Sprintf("value of %d bytes", len(recs[0].Value))) ||
		!strings.Contains(omitted, "1 source header") {
		t.Errorf("stub: value %d bytes, %s = %q (present %v)", len(stub.Value), stages.HeaderValueOmitted, omitted, ok)
	}
	if _, ok := testkit.Header(stub, "trace"); ok || string(stub.Key) != "k" {
		t.Errorf("stub kept the source header or lost its key %q", stub.Key)
	}
	if _, ok := testkit.Header(full, stages.HeaderValueOmitted); ok || string(full.Value) != "poison-small" {
		t.Errorf("the small record's dead letter = %q (omitted header %v), want its value", full.Value, ok)
	}
}

// A decoder that panics dead-letters the record as decode_error (with the
// panic in dlq.error) and the partition goes on, as for a stage panic.
func TestDecoderPanicDeadLetters(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, cfg.Topics[0], 3, 1, func(i int) string { return []string{"a", "boom", "c"}[i] })
	decode := func(_, v []byte) (string, error) {
		if string(v) == "boom" {
			var m map[string]int
			m["x"]++ // nil map write: a decoder bug
		}
		return string(v), nil
	}
	sink := memsink.New[msg]()
	r, err := run.New(cfg, decode, passthrough, stages.Sink[msg](sink),
		run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkit.RunInBackground(t, "runner", r.Run)
	testkit.WaitFor(t, 30*time.Second, "commit of every record", func() bool {
		return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == 3
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if sink.Len() != 2 {
		t.Fatalf("sink has %d records, want 2", sink.Len())
	}
	dl := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
	if len(dl) != 1 || string(dl[0].Value) != "boom" {
		t.Fatalf("DLQ = %d records, want the panicking one", len(dl))
	}
	hs := testkit.Headers(dl[0])
	if hs[stages.HeaderReason] != string(stages.ReasonDecodeError) || !strings.Contains(hs[stages.HeaderError], "decoder panic") {
		t.Fatalf("dead letter headers %v, want decode_error and the panic", hs)
	}
}
