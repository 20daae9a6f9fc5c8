package run_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages/run"
)

// A worker abandoned at shutdown while it waits for the runtime's own DLQ
// produce (the broker does not answer it) is logged as blocked there, not
// as a sink or stage ignoring its context; nothing is committed for its
// batch.
func TestAbandonLogNamesDLQProduce(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.DLQCommit = run.DLQAtLeastOnce // the worker produces its dead letters itself
	cfg.RevokeTimeout = 300 * time.Millisecond
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, cfg.Topics[0], 20, 3, poisonEvery)
	entered := hangDLQProduce(t, k, cfg.DLQTopic, func() bool { return true })
	reg := prometheus.NewRegistry()
	var logs logBuffer
	_, stop := start(t, k, cfg, poisonStage, memsink.New[msg](), run.WithRegisterer(reg), run.WithLogger(logs.logger()))
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no dead letter produced")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := logs.lines("abandoned", `blocked_in="the runtime's own DLQ produce`); len(got) != 1 {
		t.Fatalf("abandon log lines naming the DLQ produce: %q\nlog:\n%s", got, logs.String())
	}
	if got := logs.lines("abandoned", "ignores its context"); len(got) != 0 {
		t.Errorf("the abandon log blames the sink or the stage: %q", got)
	}
	if got := testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "abandoned"); got != 1 {
		t.Errorf("abandoned workers = %v, want 1", got)
	}
	if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); len(c) != 0 {
		t.Errorf("committed %v although the batch's dead letters were never acknowledged", c)
	}
}

// hangDLQProduce makes the kfake broker of k hold every produce request
// to dlqTopic while hang returns true, until the test ends (a partition
// leader that does not answer). The channel receives a value when a
// produce is held (it holds one value at most).
func hangDLQProduce(t *testing.T, k *testkit.Kafka, dlqTopic string, hang func() bool) <-chan struct{} {
	t.Helper()
	topics, err := k.Admin(t).ListTopics(testkit.Context(t), dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	dlqID := topics[dlqTopic].ID // Produce v13 names topics by ID
	held, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) })
	k.Fake().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		for _, topic := range req.(*kmsg.ProduceRequest).Topics {
			if (topic.Topic == dlqTopic || topic.TopicID == dlqID) && hang() {
				select {
				case held <- struct{}{}:
				default:
				}
				k.Fake().SleepControl(func() { <-release })
			}
		}
		return nil, nil, false
	})
	return held
}
