package run_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
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

func sum(m map[int32]int64) int64 {
	s := int64(0)
	for _, v := range m {
		s += v
	}
	return s
}
