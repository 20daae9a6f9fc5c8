package run_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/kconf"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// dlqMemberEnv, when set, turns the test binary into a group member that
// dead-letters poisonStage's records and stalls in its third dead-letter
// transaction, configured by the JSON dlqMemberSpec in its value (see
// TestMain), so that it can be killed with dead letters produced and their
// commit not done.
const dlqMemberEnv = "SLUICE_RUN_TEST_DLQ_MEMBER"

// dlqMemberSpec is what a DLQ member process needs. It may hold
// credentials: never log it.
type dlqMemberSpec struct {
	Kafka             kconf.Config
	Input, DLQ, Group string
}

// dlqKillConfig is the runner config of the DLQ kill test's members.
func dlqKillConfig(s dlqMemberSpec) run.Config {
	return run.Config{Name: "dlq-kill", Group: s.Group, Topics: []string{s.Input}, DLQTopic: s.DLQ,
		BatchMaxRecords: 10, BatchLinger: 5 * time.Millisecond, CommitInterval: 100 * time.Millisecond, RevokeTimeout: 5 * time.Second}
}

// stallTxn blocks the response of the dead-letter producer's AddOffsetsToTxn
// after the first after ones: the transaction holds its dead letters,
// uncommitted, until the process dies or the broker aborts it.
type stallTxn struct {
	n     atomic.Int32
	after int32
}

func (h *stallTxn) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key == int16(kmsg.AddOffsetsToTxn) && h.n.Add(1) > h.after {
		select {}
	}
}

// dlqMember runs one member from the spec until SIGTERM (or SIGKILL).
func dlqMember(specJSON string) int {
	var spec dlqMemberSpec
	return runChildMember("dlq member", specJSON, &spec, func() (kconf.Config, func(kopts []kgo.Opt) (runnable, error)) {
		return spec.Kafka, func(kopts []kgo.Opt) (runnable, error) {
			kopts = append(killOpts(kopts), kgo.TransactionTimeout(5*time.Second), kgo.WithHooks(&stallTxn{after: 2}))
			slow := func(ctx context.Context, m msg) ([]msg, error) {
				time.Sleep(5 * time.Millisecond) // so that it is killed mid-run
				return poisonStage(ctx, m)
			}
			return run.New(dlqKillConfig(spec), decodeString, slow, memsink.New(memsink.CountOnly[msg]()), run.WithKafkaOpts(kopts...), childLogger())
		}
	})
}

// A member killed with SIGKILL after it produced dead letters in a
// transaction and before that transaction committed them with their
// offsets leaves no dead letter visible to read_committed readers: the
// broker aborts the transaction, the member that takes the partitions over
// processes the records after the last commit again, and in the end there
// is exactly one dead letter per poison record and every record after the
// killed member's last commit is written by the new member.
func TestDLQExactlyOnceAcrossKill9(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	spec := dlqMemberSpec{Kafka: k.Config, Group: testkit.Name(t, "g"), Input: k.Topic(t, "in", 2), DLQ: k.Topic(t, "dlq", 1)}
	adm := k.Admin(t)
	const n = 700
	recs := produce(t, k.Client(t), spec.Input, n, 20, poisonEvery)
	member := testkit.StartChild(t, dlqMemberEnv, spec)
	// Dead letters produced and not committed, in the transaction the
	// member stalls in.
	killMidTransaction(t, adm, spec.DLQ, member)
	atKill := testkit.Committed(t, adm, spec.Group, spec.Input)
	if sum(atKill) >= n {
		t.Fatalf("every record was committed (%v) before the kill", atKill)
	}

	sink := memsink.New[msg]()
	runUntilCommitted(t, k, dlqKillConfig(spec), poisonStage, sink, n)
	checkOnePerPoison(t, k, spec.DLQ, recs)
	written := map[string]bool{}
	for _, m := range sink.Items() {
		written[m.Value] = true
	}
	for _, rec := range recs {
		if rec.Offset >= atKill[rec.Partition] && !strings.HasPrefix(string(rec.Value), "poison") && !written[string(rec.Value)] {
			t.Errorf("record %s/%d@%d (after the killed member's last commit) never written", rec.Topic, rec.Partition, rec.Offset)
		}
	}
}

// killMidTransaction kills member once a transaction holding records of
// partition 0 of topic is left open (the topic's high watermark past its
// last stable offset and not moving: one that stays open, not one that is
// ending), then waits until the broker aborted it.
func killMidTransaction(t *testing.T, adm *kadm.Client, topic string, member *testkit.Child) {
	t.Helper()
	open := func() (end, stable int64) {
		ctx := testkit.Context(t)
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		stables, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		e, _ := ends.Lookup(topic, 0)
		s, _ := stables.Lookup(topic, 0)
		return e.Offset, s.Offset
	}
	var lastEnd int64 = -1
	testkit.WaitFor(t, 60*time.Second, "a transaction holding records of "+topic+" left open", func() bool {
		end, stable := open()
		held := end > stable && end == lastEnd
		lastEnd = end
		if !held {
			time.Sleep(300 * time.Millisecond)
		}
		return held
	})
	member.Kill(t)
	// The broker aborts the killed member's transaction after its timeout.
	testkit.WaitFor(t, 60*time.Second, "the killed member's transaction ended", func() bool {
		end, stable := open()
		return end == stable
	})
}

// runUntilCommitted runs a member of cfg (with killOpts) with stage and
// sink until the group committed all n records of its input, then stops
// it.
func runUntilCommitted(t *testing.T, k *testkit.Kafka, cfg run.Config, stage stages.Func[string, msg], sink stages.Sink[msg], n int64) {
	t.Helper()
	r, err := run.New(cfg, decodeString, stage, sink, run.WithKafkaOpts(killOpts(k.Opts(t))...))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkit.RunInBackground(t, "runner", r.Run)
	adm := k.Admin(t)
	testkit.WaitFor(t, 120*time.Second, "every offset committed", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
