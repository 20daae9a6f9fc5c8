package run_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// benchRow is the output of BenchmarkWindowedEncodedDLQ: a key and its
// newest value.
type benchRow struct{ Key, Val string }

// benchRowSink holds its outputs encoded (key length, key, value) and
// counts what it is written.
type benchRowSink struct{ rows atomic.Int64 }

func (s *benchRowSink) Write(_ context.Context, rows []benchRow) error {
	s.rows.Add(int64(len(rows)))
	return nil
}
func (*benchRowSink) MergeKey(o benchRow) string      { return o.Key }
func (*benchRowSink) Merge(_, next benchRow) benchRow { return next }
func (*benchRowSink) AppendEncoded(dst []byte, o benchRow) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(o.Key)))
	return append(append(dst, o.Key...), o.Val...)
}
func (*benchRowSink) Decode(b []byte) (benchRow, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return benchRow{}, errors.New("corrupt row")
	}
	return benchRow{Key: string(b[w : w+int(n)]), Val: string(b[w+int(n):])}, nil
}

// BenchmarkWindowedEncodedDLQ measures the runtime's per-record cost on
// silver's path: encoded outputs merged in coalescing windows (values
// changing length, so entries move and the arena compacts), an eighth of
// the records dead-lettered and held until their transaction commits
// (DLQTransactional), on kfake. ns/op and allocs/op are per record.
func BenchmarkWindowedEncodedDLQ(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "wbench", "wbench.dlq"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	var failed atomic.Value
	for i := 0; i < b.N; i++ {
		val := fmt.Appendf(nil, `{"task":"t%d","payload":{"text":"%0*d"}}`, i, 40+i%397, i)
		cl.Produce(context.Background(), &kgo.Record{Topic: "wbench", Key: fmt.Appendf(nil, "k%d", i%50000), Value: val,
			Headers: []kgo.RecordHeader{{Key: "source", Value: []byte("bench")}}}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	cl.Close()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	var seen atomic.Int64
	stage := func(_ context.Context, m stages.Msg[string]) ([]benchRow, error) {
		seen.Add(1)
		if m.Source.Offset%8 == 7 {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "bench.rule", errors.New("value out of range"))
		}
		return []benchRow{{Key: m.Key, Val: m.Value}}, nil
	}
	sink := &benchRowSink{}
	r, err := run.New(run.Config{Name: "wbench", Topics: []string{"wbench"}, DLQTopic: "wbench.dlq", BatchLinger: time.Millisecond,
		DLQCommit: run.DLQTransactional, Window: run.WindowConfig{MaxKeys: 1 << 20, MaxAge: time.Minute}},
		decodeString, stage, sink, run.WithKafkaOpts(kgo.SeedBrokers(c.ListenAddrs()...)), run.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	benchRun(b, r, func() bool { return seen.Load() >= int64(b.N) })
	if sink.rows.Load() == 0 {
		b.Fatal("no row written")
	}
}

// benchRun times r from its start until done (polled every millisecond)
// and its shutdown, reporting allocations.
func benchRun(b *testing.B, r interface{ Run(context.Context) error }, done func() bool) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	for !done() {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
}
