package run_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// poisonStage dead-letters the records whose value starts with "poison"
// and passes the others on.
func poisonStage(_ context.Context, m msg) ([]msg, error) {
	if strings.HasPrefix(m.Value, "poison") {
		return nil, stages.DeadLetter(stages.ReasonSanityFail, "test.poison", errors.New("poison"))
	}
	return []msg{m}, nil
}

// poisonEvery is the value function of produce for poisonStage: every
// seventh record is poison.
func poisonEvery(i int) string {
	if i%7 == 3 {
		return "poison-" + strconv.Itoa(i)
	}
	return "v-" + strconv.Itoa(i)
}

// poisonCount returns how many of the first n values of poisonEvery are
// poison.
func poisonCount(n int) int {
	c := 0
	for i := range n {
		if strings.HasPrefix(poisonEvery(i), "poison") {
			c++
		}
	}
	return c
}

// dlqCopies returns how many dead letters a reader of topic with opts sees
// per source record ("topic/partition@offset").
func dlqCopies(t *testing.T, k *testkit.Kafka, topic string, opts ...kgo.Opt) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, r := range k.ReadTopic(t, topic, opts...) {
		var st, sp, so string
		for _, h := range r.Headers {
			switch h.Key {
			case stages.HeaderSourceTopic:
				st = string(h.Value)
			case stages.HeaderSourcePartition:
				sp = string(h.Value)
			case stages.HeaderSourceOffset:
				so = string(h.Value)
			}
		}
		out[st+"/"+sp+"@"+so]++
	}
	return out
}

// checkOnePerPoison fails the test unless a read_committed reader of the
// DLQ sees exactly one dead letter per poison record of recs.
func checkOnePerPoison(t *testing.T, k *testkit.Kafka, dlqTopic string, recs []*kgo.Record) {
	t.Helper()
	got := dlqCopies(t, k, dlqTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	want := 0
	for _, r := range recs {
		if !strings.HasPrefix(string(r.Value), "poison") {
			continue
		}
		want++
		c := r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "@" + strconv.FormatInt(r.Offset, 10)
		if got[c] != 1 {
			t.Errorf("%d dead letters of %s visible to read_committed, want 1", got[c], c)
		}
	}
	if len(got) != want {
		t.Errorf("dead letters of %d source records visible, want %d: %v", len(got), want, got)
	}
}

// Transactions whose offset commit is refused (a generation gone stale)
// or whose end fails are aborted and committed again later: a
// read_committed reader of the DLQ sees exactly one dead letter per poison
// record, the aborted copies are only visible to read_uncommitted, the
// DLQ metrics count each dead letter once, and every offset is committed.
func TestDLQTransactionSurvivesCommitFaults(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 2)
	const n = 350
	recs := produce(t, k.Client(t), cfg.Topics[0], n, 20, poisonEvery)
	reg := prometheus.NewRegistry()
	sink := memsink.New[msg]()
	runThroughTxnFaults(t, k, cfg, sink, n, run.WithRegisterer(reg))
	checkOnePerPoison(t, k, cfg.DLQTopic, recs)
	poison := poisonCount(n)
	uncommitted := 0
	for _, c := range dlqCopies(t, k, cfg.DLQTopic) {
		uncommitted += c
	}
	if uncommitted <= poison {
		t.Errorf("read_uncommitted sees %d dead letters, want the aborted copies beyond the %d committed ones", uncommitted, poison)
	}
	if got := testkit.Metric(t, reg, "sluice_dlq_records_total"); got != float64(poison) {
		t.Errorf("sluice_dlq_records_total = %v, want %d", got, poison)
	}
	if got := int(testkit.Metric(t, reg, "sluice_records_done_total", "topic", cfg.Topics[0])); got < n {
		t.Errorf("sluice_records_done_total = %d, want at least %d", got, n)
	}
	if got := sink.Len(); got < n-poison {
		t.Errorf("sink has %d records, want at least %d", got, n-poison)
	}
}

// runThroughTxnFaults runs a member of cfg (batches of 10, commits every
// 50ms) with poisonStage and sink, with testkit.InjectTxnFaults' faults
// (three refused transactional offset commits, then a failed end), until
// the group committed all n records of its input; then stops it.
func runThroughTxnFaults(t *testing.T, k *testkit.Kafka, cfg run.Config, sink stages.Sink[msg], n int64, opts ...run.Option) {
	t.Helper()
	cfg.BatchMaxRecords = 10
	cfg.CommitInterval = 50 * time.Millisecond
	faults := testkit.InjectTxnFaults(k, "", 3)
	_, stop := start(t, k, cfg, poisonStage, sink, opts...)
	adm := k.Admin(t)
	testkit.WaitFor(t, 60*time.Second, "every offset committed", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !faults.Injected() {
		t.Fatalf("faults not injected: %d offset commits, %d failed ends", faults.OffsetCommits.Load(), faults.FailedEnds.Load())
	}
}

// A member that dead-lettered records, and whose sink published an event
// per written record (run.Publisher), but whose offset commits never
// succeeded (a crash, or a broker outage, before its commit) leaves the
// records to the next member, which processes them again. With
// transactional commits a read_committed reader sees one dead letter per
// poison record and one event per written record; with at-least-once
// commits it sees two of each, the defect the transactional mode removes.
func TestDLQCopiesAfterUncommittedMember(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{run.DLQTransactional, run.DLQAtLeastOnce} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			k := testkit.NewKafka(t, testkit.ForceFake())
			cfg := baseConfig(t, k, 2)
			cfg.DLQCommit = mode
			cfg.BatchMaxRecords = 10
			cfg.RevokeTimeout = time.Second
			events := k.Topic(t, "events", 2)
			const n = 140
			recs := produce(t, k.Client(t), cfg.Topics[0], n, 10, poisonEvery)
			poison := poisonCount(n)
			first, second := eventSink{memsink.New[msg](), events}, eventSink{memsink.New[msg](), events}
			uncommittedThenCommitted(t, k, cfg, poisonStage, first, func() bool { return first.Len() == n-poison }, second, n)
			if second.Len() != n-poison {
				t.Errorf("the second member wrote %d records, want all %d again", second.Len(), n-poison)
			}
			if mode == run.DLQTransactional {
				checkOnePerPoison(t, k, cfg.DLQTopic, recs)
				checkOneEventPerRecord(t, k, events, recs)
				return
			}
			for c, got := range dlqCopies(t, k, cfg.DLQTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted())) {
				if got != 2 {
					t.Errorf("at-least-once: %d dead letters of %s, want 2 (one per member)", got, c)
				}
			}
			copies := eventCopies(t, k, events, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
			for _, r := range recs {
				if got := copies[string(r.Value)]; got != 2 && !strings.HasPrefix(string(r.Value), "poison") {
					t.Errorf("at-least-once: %d events of %s, want 2 (one per member)", got, r.Value)
				}
			}
		})
	}
}

// uncommittedThenCommitted runs a member with stage and first, whose every
// offset commit is refused, until written reports that it wrote its
// records, stops it, checks that it committed nothing, then runs a second
// member with second until the group committed all n records of the
// input, and stops it.
func uncommittedThenCommitted(t *testing.T, k *testkit.Kafka, cfg run.Config, stage stages.Func[string, msg], first stages.Sink[msg], written func() bool, second stages.Sink[msg], n int64) {
	t.Helper()
	adm := k.Admin(t)
	var refuse atomic.Bool
	refuse.Store(true)
	var refused atomic.Int32
	refuseCommits(k, &refuse, &refused)
	_, stop := start(t, k, cfg, stage, first)
	testkit.WaitFor(t, 30*time.Second, "every record written", written)
	testkit.WaitFor(t, 30*time.Second, "commits refused", func() bool { return refused.Load() >= 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); len(c) != 0 {
		t.Fatalf("committed %v although every commit was refused", c)
	}
	refuse.Store(false)
	_, stop = start(t, k, cfg, stage, second)
	testkit.WaitFor(t, 30*time.Second, "every offset committed", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// Members joining and leaving while batches with dead letters are in
// flight (cooperative rebalances revoke partitions mid-batch) neither
// duplicate nor lose a dead letter: each revoke commits the finished
// batches with their dead letters, and the next owner starts after them.
func TestDLQTransactionAcrossRebalances(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 4)
	cfg.BatchMaxRecords = 5
	cfg.CommitInterval = time.Second // revokes commit, not the interval
	cl, adm := k.Client(t), k.Admin(t)
	const n = 600
	recs := produce(t, cl, cfg.Topics[0], n, 40, poisonEvery)
	slow := func(ctx context.Context, m msg) ([]msg, error) {
		time.Sleep(2 * time.Millisecond)
		return poisonStage(ctx, m)
	}
	sink := memsink.New[msg]()
	opts := run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond))
	startMember := func() func() error {
		r, err := run.New(cfg, decodeString, slow, stages.Sink[msg](sink), opts)
		if err != nil {
			t.Fatal(err)
		}
		return testkit.RunInBackground(t, "member", r.Run)
	}
	committed := func() int64 { return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) }
	stopA := startMember()
	testkit.WaitFor(t, 30*time.Second, "the first member under way", func() bool { return sink.Len() > 50 })
	stopB := startMember() // takes half the partitions mid-batch
	testkit.WaitFor(t, 30*time.Second, "both members under way", func() bool { return committed() > n/4 })
	if err := stopA(); err != nil { // B takes the rest mid-batch
		t.Fatal(err)
	}
	stopC := startMember()
	testkit.WaitFor(t, 60*time.Second, "every offset committed", func() bool { return committed() == n })
	for _, stop := range []func() error{stopB, stopC} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	checkOnePerPoison(t, k, cfg.DLQTopic, recs)
	seen := map[string]bool{}
	for _, m := range sink.Items() {
		seen[m.Value] = true
	}
	for i := range n {
		if v := poisonEvery(i); !strings.HasPrefix(v, "poison") && !seen[v] {
			t.Errorf("record %s never written", v)
		}
	}
}

// Under DLQTransactional a dead letter that does not fit the DLQ topic
// even as a stub stops the runner at the commit that would produce it: a
// fatal error naming the DLQ topic and its max.message.bytes; nothing of
// that commit becomes visible, and its offsets (the poison record's among
// them) are not committed.
func TestDLQTransactionStubTooLargeIsFatal(t *testing.T) {
	t.Parallel()
	k, cfg, _, reg := runStubTooLarge(t, run.DLQTransactional)
	if got := testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])[0]; got > 2 {
		t.Errorf("committed %d, past the poison record at offset 2", got)
	}
	if got := len(k.ReadTopic(t, cfg.DLQTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted()))); got != 0 {
		t.Errorf("DLQ has %d committed records, want none", got)
	}
	if got := testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "fatal"); got != 1 {
		t.Errorf("fatal errors = %v, want 1", got)
	}
}

// A DLQ topic whose produces hang (its partition leader gone) neither
// hangs the shutdown nor leaves a dead letter visible twice: the commit
// under way is abandoned and aborted, nothing of it is committed, and the
// member that runs once the broker answers again dead-letters every poison
// record exactly once.
func TestDLQTransactionBrokerOutage(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 2)
	cfg.BatchMaxRecords = 10
	cfg.RevokeTimeout = 500 * time.Millisecond
	cl, adm := k.Client(t), k.Admin(t)
	const n = 140
	recs := produce(t, cl, cfg.Topics[0], n, 10, poisonEvery)
	var outage atomic.Bool
	outage.Store(true)
	hung := hangDLQProduce(t, k, cfg.DLQTopic, outage.Load)
	first := memsink.New[msg]()
	_, stop := start(t, k, cfg, poisonStage, first)
	select {
	case <-hung:
	case <-time.After(30 * time.Second):
		t.Fatal("no dead letter produced")
	}
	stopped := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(stopped); d > 20*time.Second {
		t.Errorf("the shutdown took %s with the DLQ produce hanging", d)
	}
	outage.Store(false) // the held produces stay held; new ones pass
	second := memsink.New[msg]()
	_, stop = start(t, k, cfg, poisonStage, second)
	testkit.WaitFor(t, 60*time.Second, "every offset committed", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkOnePerPoison(t, k, cfg.DLQTopic, recs)
}

// With static membership the dead-letter producer's transactional id is
// stable across restarts (the instance id), so a restarted member fences
// the transaction its killed predecessor left open; without it, every
// member's id is its own.
func TestDLQTransactionalIDFollowsStaticMembership(t *testing.T) {
	t.Parallel()
	static, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.InstanceID("pod-0-silver"))
	if err != nil {
		t.Fatal(err)
	}
	defer static.Close()
	again, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.InstanceID("pod-0-silver"))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if a, b := run.TxnID("silver", static), run.TxnID("silver", again); a != b || a != "silver/dlq/static/pod-0-silver" {
		t.Errorf("static ids %q and %q, want both silver/dlq/static/pod-0-silver", a, b)
	}
	dyn, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer dyn.Close()
	if a, b := run.TxnID("silver", dyn), run.TxnID("silver", dyn); a == b || !strings.HasPrefix(a, "silver/dlq/") {
		t.Errorf("dynamic ids %q and %q, want two distinct silver/dlq/… ids", a, b)
	}
}

// A DLQ outage that outlasts the transaction timeout (a partition leader
// killed, the cluster electing a new one) does not wedge the member: the
// broker aborts the open transaction and bumps the producer's epoch, and
// the same runner, once produces pass again, commits every offset with
// exactly one visible dead letter per poison record.
func TestDLQTransactionOutageBeyondTxnTimeout(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 2)
	cfg.BatchMaxRecords = 10
	cl, adm := k.Client(t), k.Admin(t)
	const n = 140
	recs := produce(t, cl, cfg.Topics[0], n, 10, poisonEvery)
	var outage atomic.Bool
	outage.Store(true)
	hung := hangDLQProduce(t, k, cfg.DLQTopic, outage.Load)
	_, stop := start(t, k, cfg, poisonStage, memsink.New[msg](),
		run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond), kgo.TransactionTimeout(2*time.Second)))
	select {
	case <-hung:
	case <-time.After(30 * time.Second):
		t.Fatal("no dead letter produced")
	}
	time.Sleep(20 * time.Second) // past the commit's timeout and the broker's transaction timeout
	outage.Store(false)          // the held produces stay held; new ones pass
	testkit.WaitFor(t, 60*time.Second, "every offset committed by the same member", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkOnePerPoison(t, k, cfg.DLQTopic, recs)
}
