package run_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages/run"
)

// benchTopic starts a kfake cluster with a 4-partition topic holding n
// records of 100 bytes.
func benchTopic(b *testing.B, n int) (*kfake.Cluster, string) {
	b.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "bench", "bench.dlq"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	val := make([]byte, 100)
	var failed atomic.Value
	for i := 0; i < n; i++ {
		cl.Produce(context.Background(), &kgo.Record{Topic: "bench", Key: []byte(fmt.Sprintf("k%d", i%1000)), Value: val}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return c, "bench"
}

// BenchmarkRuntimePerRecord measures the runtime's per-record overhead: a
// pass-through stage into an in-memory sink, on kfake, against a bare kgo
// consumer-group poll loop over the same records in the same run. ns/op is
// per record.
func BenchmarkRuntimePerRecord(b *testing.B) {
	b.Run("kgo-poll-baseline", func(b *testing.B) {
		c, topic := benchTopic(b, b.N)
		b.ResetTimer()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("baseline"), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for got < b.N {
			fs := cl.PollRecords(context.Background(), 10000)
			got += fs.NumRecords()
			cl.MarkCommitRecords(fs.Records()...)
		}
		if err := cl.CommitUncommittedOffsets(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cl.Close()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("sluice-passthrough", func(b *testing.B) {
		c, topic := benchTopic(b, b.N)
		sink := memsink.New(memsink.CountOnly[msg]())
		r, err := run.New(run.Config{Name: "bench", Topics: []string{topic}, DLQTopic: "bench.dlq", BatchLinger: time.Millisecond},
			decodeString, passthrough, sink, run.WithKafkaOpts(kgo.SeedBrokers(c.ListenAddrs()...)), run.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			b.Fatal(err)
		}
		benchRun(b, r, func() bool { return sink.Len() >= b.N })
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
}
