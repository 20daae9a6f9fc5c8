package run_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
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

// logBuffer collects a logger's output for assertions; safe for concurrent
// use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines returns the logged lines containing every one of parts.
func (b *logBuffer) lines(parts ...string) []string {
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		ok := l != ""
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

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
	for _, d := range k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted()) {
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

// deleteRecords deletes the records of topic's partition before offset
// (what retention does) and returns the new log start.
func deleteRecords(t *testing.T, adm *kadm.Client, topic string, partition int32, offset int64) int64 {
	t.Helper()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: topic, Partition: partition, At: offset})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatalf("delete records of %s/%d before %d: %v", topic, partition, offset, err)
	}
	r, ok := resp.Lookup(topic, partition)
	if !ok || r.Err != nil {
		t.Fatalf("delete records of %s/%d before %d: %v (answered %t)", topic, partition, offset, r.Err, ok)
	}
	return r.LowWatermark
}

// The group's committed offset falls below the log start while no member
// runs (retention or DeleteRecords removed records never processed). On
// restart the runner resumes at the log start, whatever StartOffset says:
// the deleted records are gone, but none that still exists is skipped (with
// "latest", kgo's reset to the end would skip them all). The skip of the
// deleted ones is made visible: a WARN naming the partition and the range,
// and sluice_offsets_skipped_total.
func TestCommittedOffsetBelowLogStart(t *testing.T) {
	t.Parallel()
	for _, startOffset := range []string{"earliest", "latest"} {
		t.Run(startOffset, func(t *testing.T) {
			t.Parallel()
			k := testkit.NewKafka(t, testkit.ForceFake())
			cfg := baseConfig(t, k, 1)
			topic := cfg.Topics[0]
			cl, adm := k.Client(t), k.Admin(t)
			first := produce(t, cl, topic, 40, 5, nil)
			sink1 := memsink.New[msg]()
			_, stop1 := start(t, k, cfg, passthrough, sink1)
			testkit.WaitFor(t, 10*time.Second, "the first 40 records committed", func() bool {
				return testkit.Committed(t, adm, cfg.Group, topic)[0] == 40
			})
			if err := stop1(); err != nil {
				t.Fatal(err)
			}
			checkLanded(t, sink1.Items(), first, nil)

			more := produce(t, cl, topic, 60, 5, func(i int) string { return fmt.Sprintf("v-%d", 40+i) })
			const logStart = 70
			if got := deleteRecords(t, adm, topic, 0, logStart); got != logStart {
				t.Fatalf("log start %d after DeleteRecords, want %d", got, logStart)
			}

			cfg.StartOffset = startOffset
			var logs logBuffer
			reg := prometheus.NewRegistry()
			sink := memsink.New[msg]()
			_, stop := start(t, k, cfg, passthrough, sink, run.WithLogger(logs.logger()), run.WithRegisterer(reg))
			waitCommittedAtEnd(t, adm, cfg.Group, topic, 10*time.Second)
			if err := stop(); err != nil {
				t.Fatalf("Run after the log start passed the commit: %v", err)
			}
			kept := more[logStart-40:]
			checkLanded(t, sink.Items(), kept, nil)
			if sink.Len() != len(kept) {
				t.Errorf("restarted runner wrote %d records, want the %d still in the log", sink.Len(), len(kept))
			}
			if got := testkit.Metric(t, reg, "sluice_offsets_skipped_total", "topic", topic); got != logStart-40 {
				t.Errorf("sluice_offsets_skipped_total = %v, want %d", got, logStart-40)
			}
			if l := logs.lines("level=WARN", "partition=0", "from=40", "to=70"); len(l) != 1 {
				t.Errorf("want one WARN naming the skipped range 40..70 of partition 0, got %q\nlog:\n%s", l, logs.String())
			}
		})
	}
}

// "latest" still starts a partition without a commit at its end: records
// produced before the group first consumed it are never processed, and
// every record from the first one processed on is.
func TestStartOffsetLatestWithoutCommit(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.StartOffset = "latest"
	topic := cfg.Topics[0]
	cl, adm := k.Client(t), k.Admin(t)
	const old = 20
	produce(t, cl, topic, old, 5, func(i int) string { return fmt.Sprintf("old-%d", i) })
	sink := memsink.New[msg]()
	r, stop := start(t, k, cfg, passthrough, sink)
	testkit.WaitFor(t, 10*time.Second, "the runner to join", r.Ready)
	// The start position is listed after the join: keep producing until
	// the runner processes a record.
	var recs []*kgo.Record
	testkit.WaitFor(t, 10*time.Second, "a record produced after the start to be processed", func() bool {
		recs = append(recs, produce(t, cl, topic, 1, 5, func(int) string { return fmt.Sprintf("new-%d", len(recs)) })...)
		time.Sleep(50 * time.Millisecond)
		return sink.Len() > 0
	})
	waitCommittedAtEnd(t, adm, cfg.Group, topic, 10*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	items := sink.Items()
	first := items[0].Source.Offset
	if first < old {
		t.Fatalf("first record processed at offset %d (%s): a record produced before the start was processed", first, items[0].Value)
	}
	checkLanded(t, items, recs[first-old:], nil)
}

// The transactional runner with StartOffset "latest" resumes a committed
// offset below the log start at the log start too, instead of skipping the
// records still in the log.
func TestTransactionalCommittedOffsetBelowLogStartLatest(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	topic := cfg.Topics[0]
	outTopic := k.Topic(t, "out", 1)
	cl, adm := k.Client(t), k.Admin(t)
	stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
		return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: []byte(itoa64(m.Source.Offset))}}, nil
	}
	runUntil := func(cfg run.Config, end int64) {
		t.Helper()
		r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), decodeString, stage, run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		stop := testkit.RunInBackground(t, "txn runner", r.Run)
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("commit at %d", end), func() bool {
			return testkit.Committed(t, adm, cfg.Group, topic)[0] == end
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	produce(t, cl, topic, 40, 5, nil)
	runUntil(cfg, 40)
	produce(t, cl, topic, 60, 5, nil)
	deleteRecords(t, adm, topic, 0, 70)
	cfg.StartOffset = "latest"
	runUntil(cfg, 100)
	var got []string
	for _, r := range k.ReadTopic(t, outTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted())) {
		got = append(got, string(r.Value))
	}
	var want []string
	for off := range int64(100) {
		if off < 40 || off >= 70 {
			want = append(want, itoa64(off))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outputs for source offsets %v, want %v", got, want)
	}
}

// The log start passes the position of a running member (retention deleted
// records it had not fetched yet, its partition being paused under
// backpressure): the runner resumes at the log start, processes every
// record still there, and reports the skipped offsets.
func TestLogStartPassesRunningPosition(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.BatchMaxRecords = 10
	cfg.MaxInFlight = 20
	topic := cfg.Topics[0]
	cl, adm := k.Client(t), k.Admin(t)
	const n, logStart = 100, 60
	recs := produce(t, cl, topic, n, 5, nil)
	release := make(chan struct{})
	sink := memsink.New(memsink.WithFailure(func(_ []msg, write int) error {
		if write == 1 {
			<-release
		}
		return nil
	}))
	var logs logBuffer
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, passthrough, sink, run.WithLogger(logs.logger()), run.WithRegisterer(reg))
	testkit.WaitFor(t, 10*time.Second, "the partition paused under backpressure", func() bool {
		return testkit.Metric(t, reg, "sluice_paused_partitions") == 1
	})
	polled := testkit.Metric(t, reg, "sluice_records_in_total") // taken by the worker so far; more are queued
	deleteRecords(t, adm, topic, 0, logStart)
	close(release)
	waitCommittedAtEnd(t, adm, cfg.Group, topic, 10*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Run after the log start passed its position: %v", err)
	}
	got := map[int64]bool{}
	for _, m := range sink.Items() {
		got[m.Source.Offset] = true
	}
	// What was fetched before the delete is processed; then a gap up to
	// the log start; then everything after it.
	p := int64(0)
	for got[p] {
		p++
	}
	if p >= logStart {
		t.Fatalf("the runner had fetched %d records before the delete (taken %v): the scenario did not put its position below the log start", p, polled)
	}
	checkLanded(t, sink.Items(), append(recs[:p:p], recs[logStart:]...), nil)
	if len(got) != int(p)+n-logStart {
		t.Errorf("wrote %d distinct records, want %d before the gap and %d after it", len(got), p, n-logStart)
	}
	if m := testkit.Metric(t, reg, "sluice_offsets_skipped_total", "topic", topic); m != float64(logStart-p) {
		t.Errorf("sluice_offsets_skipped_total = %v, want %d (offsets %d..%d)", m, logStart-p, p, logStart)
	}
	if l := logs.lines("level=WARN", "partition=0", fmt.Sprintf("from=%d", p), fmt.Sprintf("to=%d", logStart)); len(l) != 1 {
		t.Errorf("want one WARN naming the skipped range %d..%d, got %q\nlog:\n%s", p, logStart, l, logs.String())
	}
}

// runAsync starts run in the background. The returned wait, called on the
// test's goroutine, returns run's error, or fails the test when run has not
// returned within timeout (a runner that hangs or idles instead of
// failing).
func runAsync(t *testing.T, run func(context.Context) error) (wait func(timeout time.Duration) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return func(timeout time.Duration) error {
		t.Helper()
		select {
		case <-done:
			return runErr
		case <-time.After(timeout):
			cancel()
			<-done
			t.Fatalf("the runner neither failed nor stopped within %s (then returned %v)", timeout, runErr)
			return nil
		}
	}
}

// recreate deletes topic and creates it again with the same name and
// partitions (a new topic ID).
func recreate(t *testing.T, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := adm.DeleteTopics(ctx, topic); err != nil {
		t.Fatalf("delete %s: %v", topic, err)
	}
	if _, err := adm.CreateTopic(ctx, partitions, -1, nil, topic); err != nil {
		t.Fatalf("recreate %s: %v", topic, err)
	}
}

// The input topic is deleted and recreated (same name, new topic ID) while
// the runner consumes it. kgo never consumes the new instance in the same
// client; depending on when its metadata notices, it answers
// UNKNOWN_TOPIC_ID poll after poll (the runner spun on them, logging
// hundreds a second) or idles without a word. Either way the runner now
// stops with a fatal error saying the topic was recreated, without
// spinning, and a restarted runner processes every record of the new
// instance (from its start: the group's commits went with the old one) and
// commits to its high watermarks.
func TestTopicRecreatedWhileRunning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		metadata time.Duration // kgo.MetadataMinAge
	}{
		{"kgo default metadata age", 5 * time.Second}, // kgo would answer UNKNOWN_TOPIC_ID poll after poll
		{"kgo fast metadata", 100 * time.Millisecond}, // kgo would see the delete first and idle
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := testkit.NewKafka(t, testkit.ForceFake())
			cfg := baseConfig(t, k, 2)
			topic := cfg.Topics[0]
			cl, adm := k.Client(t), k.Admin(t)
			first := produce(t, cl, topic, 50, 5, nil)
			reg := prometheus.NewRegistry()
			sink := memsink.New[msg]()
			r, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](sink), run.WithRegisterer(reg), run.WithTopicCheckInterval(500*time.Millisecond),
				run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond), kgo.MetadataMinAge(tc.metadata)))
			if err != nil {
				t.Fatal(err)
			}
			wait := runAsync(t, r.Run)
			waitCommittedAtEnd(t, adm, cfg.Group, topic, 5*time.Second)
			checkLanded(t, sink.Items(), first, nil)
			recreate(t, adm, topic, 2)
			second := produce(t, k.Client(t), topic, 30, 5, func(i int) string { return fmt.Sprintf("new-%d", i) })
			runErr := wait(10 * time.Second)
			// "was deleted" alone when the watch looked three times (over
			// two check intervals) between the delete and the create.
			if runErr == nil || !strings.Contains(runErr.Error(), "input topic "+topic+" was deleted") || stages.Classify(runErr).Kind != stages.KindFatal {
				t.Fatalf("Run = %v, want a fatal error saying %s was deleted and recreated", runErr, topic)
			}
			if n := testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "fetch"); n > 100 {
				t.Errorf("%v fetch errors before failing: the poll loop spun on them", n)
			}
			if sink.Len() != len(first) {
				t.Errorf("sink has %d records, want the %d of the first instance", sink.Len(), len(first))
			}

			again := memsink.New[msg]()
			_, stop := start(t, k, cfg, passthrough, again)
			waitCommittedAtEnd(t, adm, cfg.Group, topic, 5*time.Second)
			if err := stop(); err != nil {
				t.Fatalf("restarted runner: %v", err)
			}
			checkLanded(t, again.Items(), second, nil)
			if again.Len() != len(second) {
				t.Errorf("restarted runner wrote %d records, want the %d of the new instance", again.Len(), len(second))
			}
		})
	}
}

// The input topic is deleted (not recreated) while the runner consumes it:
// Run returns a fatal error saying so instead of idling for ever.
func TestTopicDeletedWhileRunning(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	topic := cfg.Topics[0]
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, topic, 10, 5, nil)
	r, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](memsink.New[msg]()), run.WithTopicCheckInterval(500*time.Millisecond),
		run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	wait := runAsync(t, r.Run)
	waitCommittedAtEnd(t, adm, cfg.Group, topic, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := adm.DeleteTopics(ctx, topic); err != nil {
		t.Fatalf("delete %s: %v", topic, err)
	}
	runErr := wait(10 * time.Second)
	if runErr == nil || !strings.Contains(runErr.Error(), "input topic "+topic) || !strings.Contains(runErr.Error(), "was deleted") ||
		stages.Classify(runErr).Kind != stages.KindFatal {
		t.Fatalf("Run = %v, want a fatal error saying %s was deleted", runErr, topic)
	}
}

// kgo hands UNKNOWN_TOPIC_ID (a broker that does not know a new topic yet,
// or a recreated topic) back poll after poll, at once. The poll loop backs
// off after a poll that brought only errors instead of spinning on them
// (it logged and counted hundreds a second), and once the broker knows the
// topic again every record is processed; the topic kept its ID, so this is
// no fatal error.
func TestTransientUnknownTopicIDDoesNotSpin(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	topic := cfg.Topics[0]
	cl, adm := k.Client(t), k.Admin(t)
	recs := produce(t, cl, topic, 20, 5, nil)
	faults := k.Fake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.UnknownTopicID, Count: -1})
	reg := prometheus.NewRegistry()
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, passthrough, sink, run.WithRegisterer(reg), run.WithTopicCheckInterval(200*time.Millisecond),
		run.WithKafkaOpts(kgo.KeepRetryableFetchErrors())) // hand UNKNOWN_TOPIC_ID over at once, not after several metadata refreshes
	fetchErrors := func() float64 { return testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "fetch") }
	testkit.WaitFor(t, 10*time.Second, "UNKNOWN_TOPIC_ID handed to the poll loop", func() bool { return fetchErrors() > 0 })
	before := fetchErrors()
	const window = time.Second
	time.Sleep(window) // a rate: count the errors over a fixed window
	if n := fetchErrors() - before; n > 10 {
		t.Errorf("%v fetch errors in %s: the poll loop spins on them", n, window)
	}
	faults.Remove()
	waitCommittedAtEnd(t, adm, cfg.Group, topic, 10*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Run after a transient UNKNOWN_TOPIC_ID: %v", err)
	}
	checkLanded(t, sink.Items(), recs, nil)
}

// The transactional runner backs off after a poll of errors only too.
func TestTransactionalTransientUnknownTopicIDDoesNotSpin(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	topic := cfg.Topics[0]
	outTopic := k.Topic(t, "out", 1)
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, topic, 20, 5, nil)
	faults := k.Fake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.UnknownTopicID, Count: -1})
	stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
		return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: []byte(m.Value)}}, nil
	}
	reg := prometheus.NewRegistry()
	r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), decodeString, stage, run.WithRegisterer(reg), run.WithTopicCheckInterval(200*time.Millisecond),
		run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond), kgo.KeepRetryableFetchErrors()))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkit.RunInBackground(t, "txn runner", r.Run)
	fetchErrors := func() float64 { return testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "fetch") }
	testkit.WaitFor(t, 10*time.Second, "UNKNOWN_TOPIC_ID handed to the poll loop", func() bool { return fetchErrors() > 0 })
	before := fetchErrors()
	const window = time.Second
	time.Sleep(window) // a rate: count the errors over a fixed window
	if n := fetchErrors() - before; n > 10 {
		t.Errorf("%v fetch errors in %s: the poll loop spins on them", n, window)
	}
	faults.Remove()
	waitCommittedAtEnd(t, adm, cfg.Group, topic, 10*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Run after a transient UNKNOWN_TOPIC_ID: %v", err)
	}
	if got := len(k.ReadTopic(t, outTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted()))); got != 20 {
		t.Errorf("%d committed outputs, want 20", got)
	}
}

// The transactional runner also stops with a fatal error when its input
// topic is recreated, instead of idling or spinning.
func TestTransactionalTopicRecreated(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	topic := cfg.Topics[0]
	outTopic := k.Topic(t, "out", 1)
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, topic, 20, 5, nil)
	stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
		return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: []byte(m.Value)}}, nil
	}
	r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), decodeString, stage, run.WithTopicCheckInterval(500*time.Millisecond),
		run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	wait := runAsync(t, r.Run)
	waitCommittedAtEnd(t, adm, cfg.Group, topic, 5*time.Second)
	recreate(t, adm, topic, 1)
	runErr := wait(10 * time.Second)
	if runErr == nil || !strings.Contains(runErr.Error(), "input topic "+topic+" was deleted") || stages.Classify(runErr).Kind != stages.KindFatal {
		t.Fatalf("Run = %v, want a fatal error saying %s was deleted and recreated", runErr, topic)
	}
}

// A dead letter that does not fit the DLQ topic even as a stub (its
// max.message.bytes is below the size of the dlq.* headers alone) can never
// be produced: Run returns a fatal error naming the DLQ topic and its limit
// instead of retrying it for ever, and the record's offset is not committed
// (the records before it are).
func TestDLQStubTooLargeIsFatal(t *testing.T) {
	t.Parallel()
	// The batch that dead-letters fails at its own end: the at-least-once
	// path (TestDLQTransactionStubTooLargeIsFatal is the transactional one).
	k, cfg, sink, reg := runStubTooLarge(t, run.DLQAtLeastOnce)
	if got := testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])[0]; got != 2 {
		t.Errorf("committed %d, want 2 (the records before the poison one, not it)", got)
	}
	if sink.Len() != 2 {
		t.Errorf("sink has %d records, want 2", sink.Len())
	}
	if got := len(k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())); got != 0 {
		t.Errorf("DLQ has %d records, want none", got)
	}
	if got := testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "fatal"); got != 1 {
		t.Errorf("fatal errors = %v, want 1", got)
	}
}

// runStubTooLarge runs a runner with DLQ commit mode over 5 records, one
// batch each, whose third is dead-lettered into a DLQ topic whose
// max.message.bytes (256) is below the stub's size, and checks that Run
// returns a fatal MESSAGE_TOO_LARGE error naming the DLQ topic and its
// limit before a 15 s deadline.
func runStubTooLarge(t *testing.T, mode string) (*testkit.Kafka, run.Config, *memsink.Sink[msg], *prometheus.Registry) {
	t.Helper()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.BatchMaxRecords = 1
	cfg.DLQCommit = mode
	// The stub alone (dlq.* headers, dlq.error cut to 512 bytes, and
	// dlq.value_omitted) is well above 256 bytes.
	limit := "256"
	cfg.DLQTopic = k.Topic(t, "dlq.tiny", 1, map[string]*string{"max.message.bytes": &limit})
	produce(t, k.Client(t), cfg.Topics[0], 5, 1, func(i int) string {
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
	err = runToFatal(t, r)
	if err == nil || !strings.Contains(err.Error(), cfg.DLQTopic) || !strings.Contains(err.Error(), "max.message.bytes "+limit) {
		t.Fatalf("Run = %v, want a fatal error naming the DLQ topic %s and its max.message.bytes %s", err, cfg.DLQTopic, limit)
	}
	if c := stages.Classify(err); c.Kind != stages.KindFatal || !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("Run's error is not a fatal MESSAGE_TOO_LARGE: kind %v, %v", c.Kind, err)
	}
	return k, cfg, sink, reg
}
