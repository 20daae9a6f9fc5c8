package run_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

type msg = stages.Msg[string]

func decodeString(_, v []byte) (string, error) { return string(v), nil }

func passthrough(_ context.Context, m msg) ([]msg, error) { return []msg{m}, nil }

type coord struct {
	Partition int32
	Offset    int64
}

// produce writes n records "v-i" with keys "k-(i%keys)" and returns them with
// their coordinates, in production order.
func produce(t *testing.T, cl *kgo.Client, topic string, n, keys int, value func(i int) string) []*kgo.Record {
	t.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		v := fmt.Sprintf("v-%d", i)
		if value != nil {
			v = value(i)
		}
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("k-%d", i%keys)), Value: []byte(v)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	return recs
}

// start starts a runner in the background and returns a stop function that
// cancels it and returns Run's error.
func start[Out any](t *testing.T, k *testkit.Kafka, cfg run.Config, stage stages.Func[string, Out], sink stages.Sink[Out], opts ...run.Option) (*run.Runner[string, Out], func() error) {
	t.Helper()
	opts = append([]run.Option{run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond))}, opts...)
	r, err := run.New(cfg, decodeString, stage, sink, opts...)
	if err != nil {
		t.Fatalf("new runner: %v", err)
	}
	return r, testkit.RunInBackground(t, "runner", r.Run)
}

// stopWhenCommitted waits, up to timeout, until cfg's group committed n
// records of cfg.Topics[0] (offsets from 0), then stops the runner with
// stop and fails the test on its error.
func stopWhenCommitted(t *testing.T, k *testkit.Kafka, cfg run.Config, n int, timeout time.Duration, stop func() error) {
	t.Helper()
	adm := k.Admin(t)
	testkit.WaitFor(t, timeout, "commit of every record", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == int64(n)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func sum(m map[int32]int64) int64 {
	s := int64(0)
	for _, v := range m {
		s += v
	}
	return s
}

// withEachRunner builds a batch runner and a transactional one of cfg, on
// an unreachable broker (they are never run), each with its metrics on a
// new registry, and calls check with that registry in a subtest named
// after the runner ("batch", "transactional").
func withEachRunner(t *testing.T, cfg run.Config, check func(t *testing.T, reg *prometheus.Registry)) {
	t.Helper()
	decode := func(_, v []byte) ([]byte, error) { return v, nil }
	pass := func(_ context.Context, m stages.Msg[[]byte]) ([][]byte, error) { return [][]byte{m.Value}, nil }
	txStage := func(_ context.Context, m stages.Msg[[]byte]) ([]*kgo.Record, error) { return nil, nil }
	brokers := run.WithKafkaOpts(kgo.SeedBrokers("127.0.0.1:1"))
	for _, tc := range []struct {
		name  string
		build func(reg prometheus.Registerer) error
	}{
		{"batch", func(reg prometheus.Registerer) error {
			_, err := run.New(cfg, decode, pass, memsink.New[[]byte](), brokers, run.WithRegisterer(reg))
			return err
		}},
		{"transactional", func(reg prometheus.Registerer) error {
			_, err := run.NewTransactional(cfg, "p-tx", decode, txStage, brokers, run.WithRegisterer(reg))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			if err := tc.build(reg); err != nil {
				t.Fatal(err)
			}
			check(t, reg)
		})
	}
}
