package run_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/kconf"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// eventSink is a memsink whose written items are announced by one record
// each on topic (run.Publisher): the item's value, keyed by its key.
type eventSink struct {
	*memsink.Sink[msg]
	topic string
}

func (s eventSink) Records(written []msg) []*kgo.Record {
	recs := make([]*kgo.Record, len(written))
	for i, m := range written {
		recs[i] = &kgo.Record{Topic: s.topic, Key: []byte(m.Key), Value: []byte(m.Value)}
	}
	return recs
}

// eventCopies returns how many records per value a reader of topic with
// opts sees.
func eventCopies(t *testing.T, k *testkit.Kafka, topic string, opts ...kgo.Opt) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, r := range k.ReadTopic(t, topic, opts...) {
		out[string(r.Value)]++
	}
	return out
}

// checkOneEventPerRecord fails the test unless a read_committed reader of
// topic sees exactly one event per non-poison record of recs, and nothing
// else, with the events of one key in the order of their records.
func checkOneEventPerRecord(t *testing.T, k *testkit.Kafka, topic string, recs []*kgo.Record) {
	t.Helper()
	events := k.ReadTopic(t, topic, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := map[string]int{}
	last := map[string]int{} // key → index of its last event's record
	for _, e := range events {
		v := string(e.Value)
		got[v]++
		i, err := strconv.Atoi(strings.TrimPrefix(v, "v-"))
		if err != nil {
			t.Errorf("event %q is no record's value", v)
			continue
		}
		if prev, ok := last[string(e.Key)]; ok && prev >= i {
			t.Errorf("key %s: event of record %d after the event of record %d", e.Key, i, prev)
		}
		last[string(e.Key)] = i
	}
	want := 0
	for _, r := range recs {
		v := string(r.Value)
		if strings.HasPrefix(v, "poison") {
			if got[v] != 0 {
				t.Errorf("%d events of the dead-lettered record %s", got[v], v)
			}
			continue
		}
		want++
		if got[v] != 1 {
			t.Errorf("%d events of %s visible to read_committed, want 1", got[v], v)
		}
	}
	if len(events) != want {
		t.Errorf("read_committed sees %d events, want %d", len(events), want)
	}
}

// Transactions carrying a Publisher sink's records whose offset commit is
// refused (a generation gone stale) or whose end fails are aborted and
// committed again: a read_committed reader sees exactly one event per
// written record, in key order, the aborted copies are only visible to
// read_uncommitted, dead letters stay one per poison record, and every
// offset is committed.
func TestPublishedRecordsSurviveCommitFaults(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 2)
	events := k.Topic(t, "events", 2)
	const n = 350
	recs := produce(t, k.Client(t), cfg.Topics[0], n, 20, poisonEvery)
	runThroughTxnFaults(t, k, cfg, eventSink{memsink.New[msg](), events}, n)
	checkOneEventPerRecord(t, k, events, recs)
	checkOnePerPoison(t, k, cfg.DLQTopic, recs)
	uncommitted := 0
	for _, c := range eventCopies(t, k, events) {
		uncommitted += c
	}
	if written := n - poisonCount(n); uncommitted <= written {
		t.Errorf("read_uncommitted sees %d events, want the aborted copies beyond the %d committed ones", uncommitted, written)
	}
}

// Items the sink rejects are dead-lettered and announced by no record; the
// other items of their Write are.
func TestPublishedRecordsSkipRejectedItems(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	events := k.Topic(t, "events", 1)
	const n = 60
	recs := produce(t, k.Client(t), cfg.Topics[0], n, 5, poisonEvery)
	// The sink rejects the "poison" items the stage lets through.
	rejectPoison := memsink.WithFailure(func(batch []msg, _ int) error {
		rej := &stages.Rejections{}
		for i, m := range batch {
			if strings.HasPrefix(m.Value, "poison") {
				rej.Items = append(rej.Items, stages.Rejection{Index: i, Rule: "test.reject", Err: errors.New("rejected")})
			}
		}
		if len(rej.Items) == 0 {
			return nil
		}
		return rej
	})
	sink := eventSink{memsink.New(rejectPoison), events}
	_, stop := start(t, k, cfg, passthrough, stages.Sink[msg](sink))
	testkit.WaitFor(t, 30*time.Second, "every offset committed", func() bool {
		return sum(testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])) == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkOneEventPerRecord(t, k, events, recs)
	checkOnePerPoison(t, k, cfg.DLQTopic, recs)
}

// A sink that publishes records does not go with an offset store or
// timers: New refuses both.
func TestPublisherRefusesOffsetStoreAndTimers(t *testing.T) {
	t.Parallel()
	cfg := run.Config{Name: "p", Topics: []string{"in"}, DLQTopic: "in.dlq"}
	sink := eventSink{memsink.New[msg](), "events"}
	if _, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](sink), run.WithOffsetStore(&fakeStore{next: -1})); err == nil || !strings.Contains(err.Error(), "WithOffsetStore") {
		t.Errorf("offset store: New = %v, want a refusal", err)
	}
	timers := run.WithTimers[msg](time.Second, func(context.Context, run.Firing) ([]msg, error) { return nil, nil })
	if _, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](sink), timers); err == nil || !strings.Contains(err.Error(), "WithTimers") {
		t.Errorf("timers: New = %v, want a refusal", err)
	}
	if _, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](sink)); err != nil {
		t.Errorf("plain: New = %v", err)
	}
}

// eventMemberEnv, when set, turns the test binary into a group member
// whose sink publishes one event per record and that stalls in its third
// commit transaction (eventMember).
const eventMemberEnv = "SLUICE_RUN_TEST_EVENT_MEMBER"

// eventMemberSpec is what an event member process needs. It may hold
// credentials: never log it.
type eventMemberSpec struct {
	Kafka                     kconf.Config
	Input, DLQ, Events, Group string
}

// eventMember runs one member from the spec until SIGTERM (or SIGKILL).
func eventMember(specJSON string) int {
	var spec eventMemberSpec
	return runChildMember("event member", specJSON, &spec, func() (kconf.Config, func(kopts []kgo.Opt) (runnable, error)) {
		return spec.Kafka, func(kopts []kgo.Opt) (runnable, error) {
			kopts = append(killOpts(kopts), kgo.TransactionTimeout(5*time.Second), kgo.WithHooks(&stallTxn{after: 2}))
			slow := func(_ context.Context, m msg) ([]msg, error) {
				time.Sleep(5 * time.Millisecond) // so that it is killed mid-run
				return []msg{m}, nil
			}
			cfg := dlqKillConfig(dlqMemberSpec{Input: spec.Input, DLQ: spec.DLQ, Group: spec.Group})
			sink := eventSink{memsink.New(memsink.CountOnly[msg]()), spec.Events}
			return run.New(cfg, decodeString, slow, stages.Sink[msg](sink), run.WithKafkaOpts(kopts...), childLogger())
		}
	})
}

// A member killed with SIGKILL after its sink's events were produced in a
// transaction and before that transaction committed them with their
// offsets leaves none of them visible to read_committed readers: the broker
// aborts the transaction, the member that takes the partitions over writes
// the records after the last commit again and publishes their events in its
// own transactions, and in the end a read_committed reader sees exactly one
// event per record.
func TestPublishedRecordsExactlyOnceAcrossKill9(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	spec := eventMemberSpec{Kafka: k.Config, Group: testkit.Name(t, "g"), Input: k.Topic(t, "in", 2),
		DLQ: k.Topic(t, "dlq", 1), Events: k.Topic(t, "events", 1)}
	adm := k.Admin(t)
	const n = 700
	recs := produce(t, k.Client(t), spec.Input, n, 20, nil)
	member := testkit.StartChild(t, eventMemberEnv, spec)
	killMidTransaction(t, adm, spec.Events, member)
	atKill := testkit.Committed(t, adm, spec.Group, spec.Input)
	if sum(atKill) >= n {
		t.Fatalf("every record was committed (%v) before the kill", atKill)
	}
	if len(k.ReadTopic(t, spec.Events)) <= len(k.ReadTopic(t, spec.Events, kgo.FetchIsolationLevel(kgo.ReadCommitted()))) {
		t.Fatal("the killed member left no aborted event")
	}

	cfg := dlqKillConfig(dlqMemberSpec{Input: spec.Input, DLQ: spec.DLQ, Group: spec.Group})
	runUntilCommitted(t, k, cfg, passthrough, eventSink{memsink.New[msg](), spec.Events}, n)
	checkOneEventPerRecord(t, k, spec.Events, recs)
}

// A record the sink publishes that its topic refuses as too large stops the
// runner with a fatal error naming the topic, in both commit modes, rather
// than being retried forever; the offset of its batch is not committed.
func TestPublishedRecordTooLargeIsFatal(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{run.DLQTransactional, run.DLQAtLeastOnce} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			k := testkit.NewKafka(t, testkit.ForceFake())
			cfg := baseConfig(t, k, 1)
			cfg.BatchMaxRecords = 1
			cfg.DLQCommit = mode
			limit := "256"
			events := k.Topic(t, "events.tiny", 1, map[string]*string{"max.message.bytes": &limit})
			produce(t, k.Client(t), cfg.Topics[0], 5, 1, func(i int) string {
				if i == 2 {
					return "v-" + strings.Repeat("9", 4<<10)
				}
				return "v-" + strconv.Itoa(i)
			})
			r, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](eventSink{memsink.New[msg](), events}), run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)))
			if err != nil {
				t.Fatal(err)
			}
			err = runToFatal(t, r)
			if err == nil || !strings.Contains(err.Error(), events) || stages.Classify(err).Kind != stages.KindFatal || !errors.Is(err, kerr.MessageTooLarge) {
				t.Fatalf("Run = %v, want a fatal MESSAGE_TOO_LARGE naming %s", err, events)
			}
			if got := testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])[0]; got > 2 {
				t.Errorf("committed %d, past the record at offset 2", got)
			}
		})
	}
}

// runToFatal runs r for at most 15s and returns Run's error; the test fails
// when Run returns only at that deadline (a failure retried instead of
// stopping the runner).
func runToFatal(t *testing.T, r runnable) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err := r.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run = %v only after the deadline: the failure was retried instead of stopping the runner", err)
	}
	return err
}
