package run_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
)

// Partitions added to an input topic while a runner consumes it are
// assigned and consumed within about the runner's metadata age (30 s), not
// kgo's default 5 minutes.
func TestAddedPartitionsAreConsumed(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 2)
	topic := cfg.Topics[0]
	cl, adm := k.Client(t), k.Admin(t)
	before := produce(t, cl, topic, 20, 5, nil)
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, passthrough, sink)
	testkit.WaitFor(t, 30*time.Second, "the records of the first partitions", func() bool { return len(sink.Items()) >= len(before) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.CreatePartitions(ctx, 2, topic); err != nil {
		t.Fatalf("add partitions: %v", err)
	}
	// A new client sees the 4 partitions; produce one record to each new one
	// (retried while the brokers' metadata catches up).
	manual := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(2); p < 4; p++ {
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("a produce to new partition %d", p), func() bool {
			rec := &kgo.Record{Topic: topic, Partition: p, Key: []byte("new"), Value: []byte(fmt.Sprintf("new-%d", p))}
			return manual.ProduceSync(ctx, rec).FirstErr() == nil
		})
	}

	// The runner's metadata age is 30 s: allow it, a rebalance and slack,
	// far below kgo's default of 5 minutes.
	testkit.WaitFor(t, 75*time.Second, "the records of the added partitions", func() bool {
		got := map[int32]bool{}
		for _, m := range sink.Items() {
			if m.Source.Partition >= 2 {
				got[m.Source.Partition] = true
			}
		}
		return got[2] && got[3]
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(sink.Items()); n != len(before)+2 {
		t.Errorf("%d records written, want %d", n, len(before)+2)
	}
}
