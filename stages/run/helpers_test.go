package run_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
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

// runner starts a runner in the background and returns a stop function that
// cancels it and returns Run's error.
func start[Out any](t *testing.T, k *testkit.Kafka, cfg run.Config, stage stages.Func[string, Out], sink stages.Sink[Out], opts ...run.Option) (*run.Runner[string, Out], func() error) {
	t.Helper()
	opts = append([]run.Option{run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond))}, opts...)
	r, err := run.New(cfg, decodeString, stage, sink, opts...)
	if err != nil {
		t.Fatalf("new runner: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	var stopping atomic.Bool
	go func() {
		err := r.Run(ctx)
		if !stopping.Load() {
			t.Errorf("runner stopped on its own: %v", err)
		}
		errc <- err
	}()
	var once sync.Once
	var rerr error
	stop := func() error {
		once.Do(func() {
			stopping.Store(true)
			cancel()
			select {
			case rerr = <-errc:
			case <-time.After(60 * time.Second):
				rerr = fmt.Errorf("runner did not stop within 60s")
			}
		})
		return rerr
	}
	t.Cleanup(func() { _ = stop() })
	return r, stop
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// committed returns the group's committed offsets on topic (missing
// partitions have none).
func committed(t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetch offsets: %v", err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

func endOffsets(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// readAll consumes topic from the start to its current end.
func readAll(t *testing.T, k *testkit.Kafka, adm *kadm.Client, topic string) []*kgo.Record {
	t.Helper()
	ends := endOffsets(t, adm, topic)
	total := int64(0)
	for _, e := range ends {
		total += e
	}
	if total == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for int64(len(out)) < total {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: got %d of %d records: %v", topic, len(out), total, err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			}
		}
	}
	return sum
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func sum(m map[int32]int64) int64 {
	s := int64(0)
	for _, v := range m {
		s += v
	}
	return s
}
