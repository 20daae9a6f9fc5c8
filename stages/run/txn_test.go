package run_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// A fatal error aborts the poll's transaction; after a restart every input
// appears exactly once in the output (read_committed), poison records in the
// DLQ, and the group's offsets are at the end.
func TestTransactionalExactlyOnceAcrossAbort(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 2)
	cfg.BatchMaxRecords = 1000
	outTopic := k.Topic(t, "out", 2)
	cl, adm := k.Client(t), k.Admin(t)
	const n = 200
	produce(t, cl, cfg.Topics[0], n, 20, func(i int) string {
		if i%50 == 7 {
			return "poison"
		}
		return "v"
	})
	var crashed atomic.Bool
	var seen atomic.Int32
	stage := func(ctx context.Context, m msg) ([]*kgo.Record, error) {
		if m.Value == "poison" {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "tx.poison", errors.New("poison"))
		}
		if seen.Add(1) == 120 && crashed.CompareAndSwap(false, true) {
			return nil, stages.Fatal(errors.New("simulated crash"))
		}
		return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: []byte(m.Source.Topic + "/" + itoa(m.Source.Partition) + "/" + itoa64(m.Source.Offset))}}, nil
	}
	runOnce := func() error {
		r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), decodeString, stage, run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- r.Run(ctx) }()
		deadline := time.After(60 * time.Second)
		for {
			select {
			case err := <-errc:
				return err
			case <-deadline:
				t.Fatal("transactional runner did not finish")
			case <-time.After(100 * time.Millisecond):
				if sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n {
					cancel()
					return <-errc
				}
			}
		}
	}
	if err := runOnce(); err == nil || !strings.Contains(err.Error(), "simulated crash") {
		t.Fatalf("first run = %v, want the simulated crash", err)
	}
	if err := runOnce(); err != nil {
		t.Fatalf("second run: %v", err)
	}
	out := k.ReadTopic(t, outTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	counts := map[string]int{}
	for _, r := range out {
		counts[string(r.Value)]++
	}
	for v, c := range counts {
		if c != 1 {
			t.Errorf("output %s visible %d times", v, c)
		}
	}
	const poison = 4
	if len(out) != n-poison {
		t.Fatalf("read %d committed outputs, want %d", len(out), n-poison)
	}
	dlq := k.ReadTopic(t, cfg.DLQTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if len(dlq) != poison {
		t.Fatalf("DLQ has %d committed records, want %d", len(dlq), poison)
	}
	if rule, _ := testkit.Header(dlq[0], stages.HeaderRule); rule != "tx.poison" {
		t.Fatalf("dlq.rule = %q", rule)
	}
}

func itoa(i int32) string   { return strconv.Itoa(int(i)) }
func itoa64(i int64) string { return strconv.FormatInt(i, 10) }

// An output the output topic refuses as too large (larger than its
// max.message.bytes) is not lost by a committed transaction: its source
// record is dead-lettered as sink_rejected and every other output is
// visible exactly once, in order, although the produce batch they were in
// together was refused as a whole.
func TestTransactionalOutputTooLargeDeadLettersItsSource(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	maxBytes := "16384"
	outTopic := k.Topic(t, "out", 1, map[string]*string{"max.message.bytes": &maxBytes})
	cl, adm := k.Client(t), k.Admin(t)
	const n, huge = 6, 2
	produce(t, cl, cfg.Topics[0], n, 1, nil)
	rng := rand.New(rand.NewPCG(5, 6))
	stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
		size := 3000
		if m.Source.Offset == huge {
			size = 64 << 10
		}
		v := make([]byte, size)
		for i := range v {
			v[i] = byte(rng.Uint32()) // incompressible
		}
		return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: append([]byte(itoa64(m.Source.Offset)+":"), v...)}}, nil
	}
	r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), decodeString, stage, run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkit.RunInBackground(t, "txn runner", r.Run)
	testkit.WaitFor(t, 30*time.Second, "commit of every input", func() bool {
		return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rec := range k.ReadTopic(t, outTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted())) {
		got = append(got, strings.SplitN(string(rec.Value), ":", 2)[0])
	}
	if want := []string{"0", "1", "3", "4", "5"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("committed outputs of offsets %v, want %v", got, want)
	}
	dlq := k.ReadTopic(t, cfg.DLQTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if len(dlq) != 1 {
		t.Fatalf("DLQ has %d committed records, want 1", len(dlq))
	}
	hs := testkit.Headers(dlq[0])
	if hs[stages.HeaderReason] != string(stages.ReasonSinkRejected) || hs[stages.HeaderSourceOffset] != itoa64(huge) ||
		!strings.Contains(hs[stages.HeaderError], "too large") && !strings.Contains(hs[stages.HeaderError], "TOO_LARGE") {
		t.Fatalf("dead letter headers %v, want sink_rejected of offset %d", hs, huge)
	}
}

// A produce the broker fails (here: the output topic does not exist yet)
// aborts the transaction instead of committing the inputs without their
// outputs; once the topic exists every output is visible exactly once.
func TestTransactionalProduceFailureDoesNotCommit(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	outTopic := testkit.Name(t, "late")
	cl, adm := k.Client(t), k.Admin(t)
	const n = 10
	produce(t, cl, cfg.Topics[0], n, 3, nil)
	var calls atomic.Int32
	stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
		calls.Add(1)
		return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: []byte(itoa64(m.Source.Offset))}}, nil
	}
	r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), decodeString, stage,
		run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.UnknownTopicRetries(1)))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkit.RunInBackground(t, "txn runner", r.Run)
	testkit.WaitFor(t, 30*time.Second, "a second attempt or a commit", func() bool {
		return calls.Load() >= 2*n || len(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) > 0
	})
	if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); len(c) != 0 {
		t.Fatalf("committed %v while the outputs could not be produced", c)
	}
	if _, err := adm.CreateTopic(context.Background(), 1, -1, nil, outTopic); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 60*time.Second, "commit of every input", func() bool {
		return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, rec := range k.ReadTopic(t, outTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted())) {
		seen[string(rec.Value)]++
	}
	for i := range n {
		if seen[itoa64(int64(i))] != 1 {
			t.Errorf("output of offset %d visible %d times, want once", i, seen[itoa64(int64(i))])
		}
	}
}

// Another producer with the same transactional id (a zombie's replacement)
// fences the runner: Run returns the fence error instead of hanging, and the
// poll in flight is neither committed nor visible.
func TestTransactionalFencedStops(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	outTopic := k.Topic(t, "out", 1)
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, cfg.Topics[0], 10, 3, nil)
	txnID := testkit.Name(t, "txn")
	gate := make(chan struct{})
	var calls atomic.Int32
	stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
		if calls.Add(1) == 11 {
			<-gate // the first record after the first commit waits for the fence
		}
		return []*kgo.Record{{Topic: outTopic, Value: []byte(itoa64(m.Source.Offset))}}, nil
	}
	r, err := run.NewTransactional(cfg, txnID, decodeString, stage, run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(context.Background()) }()
	testkit.WaitFor(t, 30*time.Second, "first commit", func() bool { return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == 10 })
	produce(t, cl, cfg.Topics[0], 5, 3, nil)
	testkit.WaitFor(t, 30*time.Second, "the stage to block", func() bool { return calls.Load() >= 11 })
	fencer := k.Client(t, kgo.TransactionalID(txnID))
	if err := fencer.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := fencer.ProduceSync(context.Background(), &kgo.Record{Topic: outTopic, Value: []byte("fencer")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := fencer.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	close(gate)
	select {
	case err := <-errc:
		if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
			t.Fatalf("Run = %v, want the fence error", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after the fence")
	}
	if got := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0]; got != 10 {
		t.Fatalf("committed %d, want 10 (the fenced poll uncommitted)", got)
	}
	if out := k.ReadTopic(t, outTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted())); len(out) != 11 {
		t.Fatalf("%d committed outputs, want the first 10 and the fencer's", len(out))
	}
}

// A dead letter that does not fit the DLQ topic even as a stub stops the
// transactional runner with a fatal error naming the DLQ topic, as it
// stops the batch runner, instead of aborting and retrying the poll for
// ever; the poison record's offset is not committed.
func TestTransactionalDLQStubTooLargeIsFatal(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	limit := "256"
	cfg.DLQTopic = k.Topic(t, "dlq.tiny", 1, map[string]*string{"max.message.bytes": &limit})
	outTopic := k.Topic(t, "out", 1)
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, cfg.Topics[0], 3, 1, func(i int) string {
		if i == 1 {
			return "poison"
		}
		return "v-" + strconv.Itoa(i)
	})
	stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
		if m.Value == "poison" {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "test.poison", errors.New("bad input "+strings.Repeat("x", 1000)))
		}
		return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: []byte(m.Value)}}, nil
	}
	r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), decodeString, stage, run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run = %v only after the deadline: the stub was retried instead of failing", err)
	}
	if err == nil || !strings.Contains(err.Error(), cfg.DLQTopic) || stages.Classify(err).Kind != stages.KindFatal || !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("Run = %v, want a fatal MESSAGE_TOO_LARGE naming the DLQ topic %s", err, cfg.DLQTopic)
	}
	if got := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0]; got > 1 {
		t.Errorf("committed %d, want at most 1 (not past the poison record)", got)
	}
}

// sluice_records_done_total counts a committed transaction's records under
// their own topics when one poll holds records of several input topics.
func TestTransactionalCommittedCountsPerTopic(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.Topics = append(cfg.Topics, k.Topic(t, "in2", 1))
	cfg.BatchMaxRecords = 1000 // one poll takes both topics' records
	outTopic := k.Topic(t, "out", 1)
	cl, adm := k.Client(t), k.Admin(t)
	const n0, n1 = 5, 7
	produce(t, cl, cfg.Topics[0], n0, 2, nil)
	produce(t, cl, cfg.Topics[1], n1, 2, nil)
	stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
		return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: []byte(m.Value)}}, nil
	}
	reg := prometheus.NewRegistry()
	r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), decodeString, stage,
		run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)), run.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkit.RunInBackground(t, "txn runner", r.Run)
	testkit.WaitFor(t, 30*time.Second, "commit of every input", func() bool {
		return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == n0 &&
			testkit.Committed(t, adm, cfg.Group, cfg.Topics[1])[0] == n1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]float64{cfg.Topics[0]: n0, cfg.Topics[1]: n1} {
		if got := testkit.Metric(t, reg, "sluice_records_done_total", "topic", topic); got != want {
			t.Errorf("sluice_records_done_total{topic=%s} = %v, want %v", topic, got, want)
		}
		if got := testkit.Metric(t, reg, "sluice_records_in_total", "topic", topic); got != want {
			t.Errorf("sluice_records_in_total{topic=%s} = %v, want %v", topic, got, want)
		}
	}
}
