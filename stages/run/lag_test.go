package run_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// failingSink fails every Write (a sink whose service is down).
type failingSink struct{}

func (failingSink) Write(context.Context, []msg) error { return errors.New("service down") }

// While a partition's fetches are paused (its sink is down, the worker
// retries the batch), sluice_consumer_lag keeps following the records
// produced to it: the gauge comes from listed end offsets and the
// partition's position, not from fetches.
func TestConsumerLagMovesWhilePaused(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.SinkRetry = run.RetryPolicy{Initial: time.Second, Max: time.Second}
	cl := k.Client(t)
	produce(t, cl, cfg.Topics[0], 10, 3, nil)
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, passthrough, stages.Sink[msg](failingSink{}), run.WithRegisterer(reg), run.WithLagInterval(50*time.Millisecond))
	lag := func() float64 {
		return testkit.Metric(t, reg, "sluice_consumer_lag", "topic", cfg.Topics[0], "partition", "0")
	}
	testkit.WaitFor(t, 30*time.Second, "lag 10 with the sink down", func() bool { return lag() == 10 })
	testkit.WaitFor(t, 30*time.Second, "the partition paused for the sink retry", func() bool {
		return testkit.Metric(t, reg, "sluice_paused_partitions") == 1
	})
	produce(t, cl, cfg.Topics[0], 25, 3, nil)
	testkit.WaitFor(t, 30*time.Second, "lag 35 with the partition paused", func() bool { return lag() == 35 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
