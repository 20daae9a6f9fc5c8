package run_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// Failure modes of the runtime under broker-side faults (kfake): coordinator
// and leader moves, retention passing the committed offset, a topic
// recreated under the runner, and a DLQ topic too small for any dead letter.

// slowSink is a memory sink that takes perRecord for every record written,
// so that consumption lasts long enough to inject a fault in the middle.
func slowSink(perRecord time.Duration) *memsink.Sink[msg] {
	return memsink.New(memsink.WithFailure(func(batch []msg, _ int) error {
		time.Sleep(time.Duration(len(batch)) * perRecord)
		return nil
	}))
}

// checkLanded asserts the at-least-once contract on what the sink received:
// every record of want landed; within a partition (and so within a key)
// records were first written in offset order; and a record was written
// twice only at or after floor[partition], the committed offset when the
// fault that may redeliver happened (nil floor: no duplicate allowed).
func checkLanded(t *testing.T, items []msg, want []*kgo.Record, floor map[int32]int64) {
	t.Helper()
	seen := map[coord]int{}
	last := map[int32]int64{}
	lastKey := map[string]int64{}
	for _, m := range items {
		c := coord{m.Source.Partition, m.Source.Offset}
		seen[c]++
		if seen[c] > 1 {
			if f, ok := floor[c.Partition]; !ok || c.Offset < f {
				t.Errorf("record %d/%d written %d times; only records at or after the committed offset %v may be redelivered", c.Partition, c.Offset, seen[c], floor)
			}
			continue
		}
		if prev, ok := last[c.Partition]; ok && c.Offset < prev {
			t.Errorf("partition %d: offset %d first written after offset %d", c.Partition, c.Offset, prev)
		}
		last[c.Partition] = c.Offset
		if prev, ok := lastKey[m.Key]; ok && c.Offset < prev {
			t.Errorf("key %s: offset %d first written after offset %d", m.Key, c.Offset, prev)
		}
		lastKey[m.Key] = c.Offset
	}
	missing := 0
	for _, r := range want {
		if seen[coord{r.Partition, r.Offset}] == 0 {
			missing++
			if missing <= 5 {
				t.Errorf("record %d/%d (%s) never written", r.Partition, r.Offset, r.Value)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d records never written", missing, len(want))
	}
}

// waitCommittedAtEnd waits until group's committed offsets on topic equal
// the topic's high watermarks on every partition.
func waitCommittedAtEnd(t *testing.T, adm *kadm.Client, group, topic string, timeout time.Duration) {
	t.Helper()
	ends := testkit.EndOffsets(t, adm, topic)
	var got map[int32]int64
	testkit.WaitFor(t, timeout, fmt.Sprintf("committed offsets of %s at the high watermarks %v", topic, ends), func() bool {
		got = testkit.Committed(t, adm, group, topic)
		for p, e := range ends {
			if got[p] != e {
				return false
			}
		}
		return true
	})
}

// multiBroker is a kfake cluster of three brokers.
func multiBroker(t *testing.T) *testkit.Kafka {
	t.Helper()
	return testkit.NewKafka(t, testkit.ForceFake(), testkit.WithKfakeOpts(kfake.NumBrokers(3)))
}

// The group coordinator moves twice while the runner consumes, and in
// between the old coordinator answers NOT_COORDINATOR to commits and
// heartbeats: commits land on the new coordinator, nothing is lost, order is
// kept, and the group's offsets end at the high watermarks.
func TestGroupCoordinatorMovesMidRun(t *testing.T) {
	t.Parallel()
	k := multiBroker(t)
	cfg := baseConfig(t, k, 3)
	cl, adm := k.Client(t), k.Admin(t)
	recs := produce(t, cl, cfg.Topics[0], 600, 17, nil)
	sink := slowSink(2 * time.Millisecond)
	_, stop := start(t, k, cfg, passthrough, sink)

	testkit.WaitFor(t, 10*time.Second, "a first commit", func() bool { return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) > 0 })
	floor := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])
	faults := k.Fake().Fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: cfg.Group, Err: kerr.NotCoordinator, Count: 4},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Group: cfg.Group, Err: kerr.NotCoordinator, Count: 4},
	)
	before := k.Fake().CoordinatorFor(cfg.Group)
	k.Fake().RehashCoordinators()
	testkit.WaitFor(t, 10*time.Second, "the runner to meet NOT_COORDINATOR", func() bool { return faults.Hits() >= 2 })
	mid := sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]))
	k.Fake().RehashCoordinators()
	testkit.WaitFor(t, 10*time.Second, "commits to move past the moves", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) > mid
	})
	waitCommittedAtEnd(t, adm, cfg.Group, cfg.Topics[0], 12*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Run after coordinator moves: %v", err)
	}
	t.Logf("coordinator %d -> %d, faults hit %d, sink %d records", before, k.Fake().CoordinatorFor(cfg.Group), faults.Hits(), sink.Len())
	checkLanded(t, sink.Items(), recs, floor)
}

// Partition leaders move while the runner consumes. First fetches are
// answered NOT_LEADER_OR_FOLLOWER a few times; then, with fetches held at
// the brokers, every leader is shuffled, partition 0 is moved to another
// broker and more records arrive (under the new leader epochs, as on a real
// cluster, where OffsetForLeaderEpoch then places the old epoch's end at
// the log end). The runner follows the leaders, loses nothing, keeps order,
// writes no record twice (no rebalance, no reset) and commits up to the high
// watermarks.
func TestPartitionLeadersMoveMidRun(t *testing.T) {
	t.Parallel()
	k := multiBroker(t)
	cfg := baseConfig(t, k, 3)
	topic := cfg.Topics[0]
	cl, adm := k.Client(t, kgo.MetadataMinAge(50*time.Millisecond)), k.Admin(t)
	recs := produce(t, cl, topic, 600, 17, nil)
	sink := slowSink(2 * time.Millisecond)
	_, stop := start(t, k, cfg, passthrough, sink, run.WithKafkaOpts(kgo.MetadataMinAge(100*time.Millisecond)))

	testkit.WaitFor(t, 10*time.Second, "the first records", func() bool { return sink.Len() >= 50 })
	fetchFaults := k.Fake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: 5})
	testkit.WaitFor(t, 10*time.Second, "fetches refused as not leader", func() bool { return fetchFaults.Hits() >= 5 })

	moved := make(chan struct{})
	var held atomic.Int32
	k.Fake().ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case <-moved:
			k.Fake().DropControl()
			return nil, nil, false
		default:
		}
		held.Add(1)
		k.Fake().SleepControl(func() { <-moved })
		return nil, nil, false
	})
	testkit.WaitFor(t, 10*time.Second, "a fetch held at a broker", func() bool { return held.Load() > 0 })
	leader := k.Fake().LeaderFor(topic, 0)
	k.Fake().ShufflePartitionLeaders()
	if err := k.Fake().MoveTopicPartition(topic, 0, (leader+1)%3); err != nil {
		t.Fatalf("move partition 0: %v", err)
	}
	more := produce(t, cl, topic, 60, 17, func(i int) string { return fmt.Sprintf("after-move-%d", i) })
	close(moved)

	waitCommittedAtEnd(t, adm, cfg.Group, topic, 12*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Run after leader moves: %v", err)
	}
	checkLanded(t, sink.Items(), append(recs, more...), nil)
}

// While dead letters are produced, the DLQ partition's leader moves and the
// old leader answers NOT_LEADER_OR_FOLLOWER: the produce follows the new
// leader, every dead letter lands exactly once (the refused produces were
// not appended), and the offsets behind them commit.
func TestDLQProduceFollowsLeaderMove(t *testing.T) {
	t.Parallel()
	k := multiBroker(t)
	cfg := baseConfig(t, k, 1)
	cfg.BatchMaxRecords = 10
	cl, adm := k.Client(t), k.Admin(t)
	const n = 200
	recs := produce(t, cl, cfg.Topics[0], n, 7, func(i int) string {
		if i%20 == 5 {
			return "poison-" + strconv.Itoa(i)
		}
		return "v-" + strconv.Itoa(i)
	})
	var good []*kgo.Record
	for _, r := range recs {
		if !strings.HasPrefix(string(r.Value), "poison") {
			good = append(good, r)
		}
	}
	stage := func(_ context.Context, m msg) ([]msg, error) {
		if strings.HasPrefix(m.Value, "poison") {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "test.poison", errors.New("poison"))
		}
		return []msg{m}, nil
	}
	// Refuse the DLQ's produces as not leader a few times, moving the
	// partition to another broker at the first refusal.
	dlqLeader := k.Fake().LeaderFor(cfg.DLQTopic, 0)
	produceFaults := k.Fake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfg.DLQTopic, Err: kerr.NotLeaderForPartition, Count: 3})
	sink := slowSink(time.Millisecond)
	_, stop := start(t, k, cfg, stage, sink, run.WithKafkaOpts(kgo.MetadataMinAge(100*time.Millisecond)))
	testkit.WaitFor(t, 10*time.Second, "a DLQ produce refused as not leader", func() bool { return produceFaults.Hits() >= 1 })
	if err := k.Fake().MoveTopicPartition(cfg.DLQTopic, 0, (dlqLeader+1)%3); err != nil {
		t.Fatalf("move the DLQ partition: %v", err)
	}
	waitCommittedAtEnd(t, adm, cfg.Group, cfg.Topics[0], 12*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Run with the DLQ leader moving: %v", err)
	}
	if produceFaults.Hits() < 3 {
		t.Errorf("only %d DLQ produces were refused, want 3", produceFaults.Hits())
	}
	checkLanded(t, sink.Items(), good, nil)
	count := map[string]int{}
	for _, d := range k.ReadTopic(t, cfg.DLQTopic) {
		count[string(d.Value)]++
	}
	for _, r := range recs {
		v := string(r.Value)
		if strings.HasPrefix(v, "poison") && count[v] != 1 {
			t.Errorf("dead letter %s in the DLQ %d times, want once", v, count[v])
		}
	}
	if len(count) != n-len(good) {
		t.Errorf("DLQ holds %d distinct records, want %d", len(count), n-len(good))
	}
}

// A dead letter that does not fit the DLQ topic even as a stub (its
// max.message.bytes is below the size of the dlq.* headers alone) can never
// be produced: Run returns a fatal error naming the DLQ topic and its limit
// instead of retrying it for ever, and the record's offset is not committed
// (the records before it are).
func TestDLQStubTooLargeIsFatal(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.BatchMaxRecords = 1
	// The stub alone (dlq.* headers, dlq.error cut to 512 bytes, and
	// dlq.value_omitted) is well above 256 bytes.
	limit := "256"
	cfg.DLQTopic = k.Topic(t, "dlq.tiny", 1, map[string]*string{"max.message.bytes": &limit})
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, cfg.Topics[0], 5, 1, func(i int) string {
		if i == 2 {
			return "poison:" + strings.Repeat("p", 4<<10)
		}
		return "v-" + strconv.Itoa(i)
	})
	stage := func(_ context.Context, m msg) ([]msg, error) {
		if strings.HasPrefix(m.Value, "poison") {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "test.poison", errors.New("bad input "+strings.Repeat("x", 1000)))
		}
		return []msg{m}, nil
	}
	sink := memsink.New[msg]()
	reg := prometheus.NewRegistry()
	r, err := run.New(cfg, decodeString, stage, stages.Sink[msg](sink), run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)), run.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run = %v only after the deadline: the stub was retried instead of failing", err)
	}
	if err == nil || !strings.Contains(err.Error(), cfg.DLQTopic) || !strings.Contains(err.Error(), "max.message.bytes "+limit) {
		t.Fatalf("Run = %v, want a fatal error naming the DLQ topic %s and its max.message.bytes %s", err, cfg.DLQTopic, limit)
	}
	if c := stages.Classify(err); c.Kind != stages.KindFatal || !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("Run's error is not a fatal MESSAGE_TOO_LARGE: kind %v, %v", c.Kind, err)
	}
	if got := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0]; got != 2 {
		t.Errorf("committed %d, want 2 (the records before the poison one, not it)", got)
	}
	if sink.Len() != 2 {
		t.Errorf("sink has %d records, want 2", sink.Len())
	}
	if got := len(k.ReadTopic(t, cfg.DLQTopic)); got != 0 {
		t.Errorf("DLQ has %d records, want none", got)
	}
	if got := testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "fatal"); got != 1 {
		t.Errorf("fatal errors = %v, want 1", got)
	}
}
