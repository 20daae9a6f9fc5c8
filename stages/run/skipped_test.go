package run_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages/run"
)

// The transactional runner reports records deleted before the group
// consumed them as the batch runner does (TestCommittedOffsetBelowLogStart):
// its committed offset fell below the log start while it was stopped, so
// on restart it resumes at the log start, logs one WARN naming the
// partition and the range, counts sluice_offsets_skipped_total, and
// produces the outputs of every record still in the log exactly once.
// When the transaction of the poll that skipped aborts (its outputs could
// not be produced) and the poll comes again, the range is still reported
// once.
func TestTransactionalOffsetsSkipped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		abort bool // the restarted runner's first transactions abort
	}{
		{"committed at once", false},
		{"aborted and polled again", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := testkit.NewKafka(t, testkit.ForceFake())
			cfg := baseConfig(t, k, 1)
			topic := cfg.Topics[0]
			outTopic := testkit.Name(t, "out") // created below; missing, it aborts the transactions
			cl, adm := k.Client(t), k.Admin(t)
			create := func() {
				t.Helper()
				if _, err := adm.CreateTopic(context.Background(), 1, -1, nil, outTopic); err != nil {
					t.Fatalf("create %s: %v", outTopic, err)
				}
			}
			var calls atomic.Int32
			stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
				calls.Add(1)
				return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: []byte(itoa64(m.Source.Offset))}}, nil
			}
			newRunner := func(opts ...run.Option) *run.TxRunner[string] {
				t.Helper()
				opts = append([]run.Option{run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond), kgo.UnknownTopicRetries(1))}, opts...)
				r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), decodeString, stage, opts...)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			waitCommitted := func(end int64) {
				t.Helper()
				testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("commit at %d", end), func() bool {
					return testkit.Committed(t, adm, cfg.Group, topic)[0] == end
				})
			}

			produce(t, cl, topic, 40, 5, nil)
			create() // with abort, deleted again before the restart
			stop1 := testkit.RunInBackground(t, "first txn runner", newRunner().Run)
			waitCommitted(40)
			if err := stop1(); err != nil {
				t.Fatalf("first run: %v", err)
			}
			produce(t, cl, topic, 60, 5, nil)
			const logStart = 70
			if got := deleteRecords(t, adm, topic, 0, logStart); got != logStart {
				t.Fatalf("log start %d after DeleteRecords, want %d", got, logStart)
			}

			if tc.abort {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := adm.DeleteTopics(ctx, outTopic); err != nil {
					t.Fatalf("delete %s: %v", outTopic, err)
				}
			}
			var logs logBuffer
			reg := prometheus.NewRegistry()
			calls.Store(0)
			stop := testkit.RunInBackground(t, "txn runner", newRunner(run.WithRegisterer(reg), run.WithLogger(logs.logger())).Run)
			if tc.abort {
				const kept = 100 - logStart
				testkit.WaitFor(t, 30*time.Second, "the poll after the skip processed twice", func() bool { return calls.Load() >= 2*kept })
				if c := testkit.Committed(t, adm, cfg.Group, topic)[0]; c != 40 {
					t.Fatalf("committed %d while the outputs could not be produced, want 40", c)
				}
				create()
			}
			waitCommitted(100)
			if err := stop(); err != nil {
				t.Fatalf("Run after the log start passed the commit: %v", err)
			}

			if got := testkit.Metric(t, reg, "sluice_offsets_skipped_total", "topic", topic); got != logStart-40 {
				t.Errorf("sluice_offsets_skipped_total = %v, want %d (offsets 40..%d)", got, logStart-40, logStart)
			}
			if l := logs.lines("level=WARN", "records deleted before they were consumed", "partition=0", "from=40", fmt.Sprintf("to=%d", logStart)); len(l) != 1 {
				t.Errorf("want one WARN naming the skipped range 40..%d of partition 0, got %q\nlog:\n%s", logStart, l, logs.String())
			}
			seen := map[string]int{}
			for _, rec := range k.ReadTopic(t, outTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted())) {
				seen[string(rec.Value)]++
			}
			want := map[string]int{}
			for off := int64(logStart); off < 100; off++ {
				want[itoa64(off)] = 1
			}
			if !tc.abort { // the topic kept the first run's outputs too
				for off := range int64(40) {
					want[itoa64(off)] = 1
				}
			}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				t.Errorf("committed outputs by source offset %v, want %v", seen, want)
			}
		})
	}
}

// A group without a commit that starts at the log start of a topic whose
// early records were deleted skips nothing it ever had: neither runner
// reports a skip (kgo lists such a partition as committed at offset 0), and
// every record still in the log is processed.
func TestNewGroupReportsNoSkip(t *testing.T) {
	t.Parallel()
	const n, logStart = 40, 30
	setup := func(t *testing.T) (*testkit.Kafka, run.Config) {
		t.Helper()
		k := testkit.NewKafka(t, testkit.ForceFake())
		cfg := baseConfig(t, k, 1)
		produce(t, k.Client(t), cfg.Topics[0], n, 5, nil)
		if got := deleteRecords(t, k.Admin(t), cfg.Topics[0], 0, logStart); got != logStart {
			t.Fatalf("log start %d after DeleteRecords, want %d", got, logStart)
		}
		return k, cfg
	}
	check := func(t *testing.T, reg *prometheus.Registry, logs *logBuffer, topic string, processed []int64) {
		t.Helper()
		if got := testkit.Metric(t, reg, "sluice_offsets_skipped_total", "topic", topic); got != 0 {
			t.Errorf("sluice_offsets_skipped_total = %v for a group that never had the deleted records, want 0", got)
		}
		if l := logs.lines("records deleted before they were consumed"); len(l) != 0 {
			t.Errorf("want no WARN about deleted records, got %q", l)
		}
		if fmt.Sprint(processed) != fmt.Sprint([]int64{30, 31, 32, 33, 34, 35, 36, 37, 38, 39}) {
			t.Errorf("processed offsets %v, want %d..%d", processed, logStart, n-1)
		}
	}
	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		k, cfg := setup(t)
		var logs logBuffer
		reg := prometheus.NewRegistry()
		sink := memsink.New[msg]()
		_, stop := start(t, k, cfg, passthrough, sink, run.WithRegisterer(reg), run.WithLogger(logs.logger()))
		waitCommittedAtEnd(t, k.Admin(t), cfg.Group, cfg.Topics[0], 10*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		var processed []int64
		for _, m := range sink.Items() {
			processed = append(processed, m.Source.Offset)
		}
		check(t, reg, &logs, cfg.Topics[0], processed)
	})
	t.Run("transactional", func(t *testing.T) {
		t.Parallel()
		k, cfg := setup(t)
		outTopic := k.Topic(t, "out", 1)
		stage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
			return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: []byte(itoa64(m.Source.Offset))}}, nil
		}
		var logs logBuffer
		reg := prometheus.NewRegistry()
		r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), decodeString, stage, run.WithRegisterer(reg), run.WithLogger(logs.logger()),
			run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		stop := testkit.RunInBackground(t, "txn runner", r.Run)
		waitCommittedAtEnd(t, k.Admin(t), cfg.Group, cfg.Topics[0], 10*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		var processed []int64
		for _, rec := range k.ReadTopic(t, outTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted())) {
			off, err := strconv.ParseInt(string(rec.Value), 10, 64)
			if err != nil {
				t.Fatalf("output value %q: %v", rec.Value, err)
			}
			processed = append(processed, off)
		}
		check(t, reg, &logs, cfg.Topics[0], processed)
	})
}
