package run_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// timedEventSink is an eventSink that notes when each item's Write
// returned (by value), for BenchmarkPublishVisibility.
type timedEventSink struct {
	eventSink
	mu      sync.Mutex
	written map[string]time.Time
}

func (s *timedEventSink) Write(ctx context.Context, batch []msg) error {
	if err := s.eventSink.Write(ctx, batch); err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range batch {
		s.written[m.Value] = now
	}
	return nil
}

// BenchmarkPublishVisibility measures how long after its Write a
// Publisher's record becomes visible to a read_committed reader: with
// DLQTransactional (in the next periodic commit's transaction, so up to
// CommitInterval, here the default 1s) against DLQAtLeastOnce (produced
// right after the Write), side by side in one run, on records arriving at
// a steady pace (about 1000/s for 3s). It reports the median, the 99th
// percentile and the maximum in ms (visible-p50-ms …); ns/op means
// nothing. On kfake unless KAFKA_BROKERS is set.
func BenchmarkPublishVisibility(b *testing.B) {
	for _, mode := range []string{run.DLQTransactional, run.DLQAtLeastOnce} {
		b.Run(mode, func(b *testing.B) {
			var lat []time.Duration
			for range b.N {
				lat = append(lat, publishVisibility(b, mode)...)
			}
			slices.Sort(lat)
			ms := func(q float64) float64 {
				return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / float64(time.Millisecond)
			}
			b.ReportMetric(ms(0.5), "visible-p50-ms")
			b.ReportMetric(ms(0.99), "visible-p99-ms")
			b.ReportMetric(ms(1), "visible-max-ms")
		})
	}
}

// publishVisibility runs one member of mode over 3000 records produced at
// a steady pace and returns, per record, the time from its Write to its
// event's arrival at a read_committed consumer.
func publishVisibility(b *testing.B, mode string) []time.Duration {
	b.Helper()
	k := testkit.NewKafka(b, testkit.FakeOK())
	in, dlq, events := k.Topic(b, "in", 4), k.Topic(b, "dlq", 1), k.Topic(b, "events", 4)
	cfg := run.Config{Name: "vis", Group: testkit.Name(b, "g"), Topics: []string{in}, DLQTopic: dlq, DLQCommit: mode}
	sink := &timedEventSink{eventSink: eventSink{memsink.New(memsink.CountOnly[msg]()), events}, written: map[string]time.Time{}}
	r, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](sink), run.WithKafkaOpts(k.Opts(b)...), run.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	stop := testkit.RunInBackground(b, "runner", r.Run)
	defer func() {
		if err := stop(); err != nil {
			b.Error(err)
		}
	}()
	reader := k.Client(b, kgo.ConsumeTopics(events), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(10*time.Millisecond))
	prod := k.Client(b, kgo.ProducerLinger(0))
	const n = 3000
	ctx := testkit.Context(b)
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for i := 0; i < n; i += 10 {
			<-t.C
			for j := i; j < i+10; j++ {
				prod.Produce(ctx, &kgo.Record{Topic: in, Key: []byte("k-" + strconv.Itoa(j%97)), Value: []byte("v-" + strconv.Itoa(j))}, nil)
			}
		}
	}()
	seen := map[string]time.Time{}
	for len(seen) < n {
		fs := reader.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("%d of %d events seen: %v", len(seen), n, ctx.Err())
		}
		now := time.Now()
		fs.EachRecord(func(rec *kgo.Record) {
			if _, ok := seen[string(rec.Value)]; !ok {
				seen[string(rec.Value)] = now
			}
		})
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	lat := make([]time.Duration, 0, n)
	for v, at := range seen {
		lat = append(lat, at.Sub(sink.written[v]))
	}
	return lat
}
