package kafkasink_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/kafkasink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

func runConfig(t *testing.T, k *testkit.Kafka) run.Config {
	t.Helper()
	return run.Config{
		Name:            "fwd",
		Group:           testkit.Name(t, "g"),
		Topics:          []string{k.Topic(t, "in", 1)},
		DLQTopic:        k.Topic(t, "dlq", 1),
		BatchMaxRecords: 50,
		BatchLinger:     10 * time.Millisecond,
		CommitInterval:  100 * time.Millisecond,
		SinkRetry:       run.RetryPolicy{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
	}
}

func produceValues(t *testing.T, cl *kgo.Client, topic string, values ...string) {
	t.Helper()
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte("k-" + v), Value: []byte(v)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func decodeString(_, v []byte) (string, error) { return string(v), nil }

func forward(_ context.Context, m stages.Msg[string]) ([]string, error) {
	return []string{m.Value}, nil
}

// Through the runtime, a record the mapping function fails on goes to the
// DLQ (with its original key and value) and the rest of its batch lands on
// the output topic; the partition is committed to its end instead of
// hanging on a retried batch. A plain mapping error is dead-lettered as
// sink_rejected with rule kafka.mapping; a dead-letter one with the
// caller's own reason and rule, its message in dlq.error.
func TestRunDeadLettersRecordTheMappingFailsOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		err    error
		reason stages.Reason
		rule   string
		errHas []string // substrings of dlq.error
	}{
		{"plain", errors.New("value not mappable"), stages.ReasonSinkRejected, kafkasink.RuleMapping, []string{"value not mappable"}},
		{"dead letter", stages.DeadLetter(stages.ReasonSanityFail, "out.amount", errors.New("value not mappable")),
			stages.ReasonSanityFail, "out.amount", []string{"value not mappable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := testkit.NewKafka(t, testkit.ForceFake())
			cfg := runConfig(t, k)
			out := k.Topic(t, "out", 1)
			cl, adm := k.Client(t), k.Admin(t)
			produceValues(t, cl, cfg.Topics[0], "a", "bad", "c")
			sink := kafkasink.New(cl, func(v string) (*kgo.Record, error) {
				if v == "bad" {
					return nil, tc.err
				}
				return &kgo.Record{Topic: out, Key: []byte(v), Value: []byte(v)}, nil
			})
			r, err := run.New(cfg, decodeString, forward, sink, run.WithKafkaOpts(k.Opts(t)...))
			if err != nil {
				t.Fatal(err)
			}
			stop := testkit.RunInBackground(t, "runner", r.Run)
			testkit.WaitFor(t, 30*time.Second, "commit of every record", func() bool {
				return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == 3
			})
			if err := stop(); err != nil {
				t.Fatalf("runner: %v", err)
			}
			var vals []string
			for _, rec := range k.ReadTopic(t, out) {
				vals = append(vals, string(rec.Value))
			}
			if !slices.Equal(vals, []string{"a", "c"}) {
				t.Fatalf("output topic holds %q, want [a c]", vals)
			}
			dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
			if len(dlq) != 1 || string(dlq[0].Key) != "k-bad" || string(dlq[0].Value) != "bad" {
				t.Fatalf("DLQ holds %d records (first %v), want only the original k-bad/bad", len(dlq), dlq)
			}
			hs := testkit.Headers(dlq[0])
			want := map[string]string{
				stages.HeaderReason:       string(tc.reason),
				stages.HeaderRule:         tc.rule,
				stages.HeaderStage:        "fwd/sink",
				stages.HeaderSourceTopic:  cfg.Topics[0],
				stages.HeaderSourceOffset: "1",
			}
			for h, v := range want {
				if hs[h] != v {
					t.Errorf("header %s = %q, want %q", h, hs[h], v)
				}
			}
			for _, sub := range tc.errHas {
				if !strings.Contains(hs[stages.HeaderError], sub) {
					t.Errorf("dlq.error = %q, want it to contain %q", hs[stages.HeaderError], sub)
				}
			}
		})
	}
}

// Through the runtime, a mapping error classified as fatal stops the runner
// with that error; nothing is dead-lettered, produced or committed, so the
// record is delivered again after a restart.
func TestRunStopsOnFatalMappingError(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := runConfig(t, k)
	out := k.Topic(t, "out", 1)
	cl, adm := k.Client(t), k.Admin(t)
	produceValues(t, cl, cfg.Topics[0], "a", "bad", "c")
	errSchema := errors.New("output schema unavailable")
	sink := kafkasink.New(cl, func(v string) (*kgo.Record, error) {
		if v == "bad" {
			return nil, stages.Fatal(errSchema)
		}
		return &kgo.Record{Topic: out, Key: []byte(v), Value: []byte(v)}, nil
	})
	r, err := run.New(cfg, decodeString, forward, sink, run.WithKafkaOpts(k.Opts(t)...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run did not stop on its own: %v", err)
	}
	if !errors.Is(err, errSchema) {
		t.Fatalf("Run = %v, want the fatal mapping error", err)
	}
	if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); c[0] > 1 {
		t.Fatalf("committed %v, want nothing past the failing record", c)
	}
	if n := len(k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())); n != 0 {
		t.Fatalf("DLQ holds %d records, want none", n)
	}
	for _, rec := range k.ReadTopic(t, out) {
		if string(rec.Value) != "a" {
			t.Fatalf("output topic holds %q, want at most the record before the failing one", rec.Value)
		}
	}
}

// Through the runtime, an item mapped to no topic stops the runner with a
// clear error and commits nothing, instead of retrying the batch for ever.
func TestRunStopsOnItemWithoutTopic(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := runConfig(t, k)
	cl, adm := k.Client(t), k.Admin(t)
	produceValues(t, cl, cfg.Topics[0], "a", "b")
	sink := kafkasink.New(cl, func(v string) (*kgo.Record, error) {
		return &kgo.Record{Value: []byte(v)}, nil
	})
	r, err := run.New(cfg, decodeString, forward, sink, run.WithKafkaOpts(k.Opts(t)...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run did not stop on its own: %v", err)
	}
	if err == nil || !strings.Contains(err.Error(), "without a topic") {
		t.Fatalf("Run = %v, want an error about the record without a topic", err)
	}
	if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); c[0] > 0 {
		t.Fatalf("committed %v, want nothing", c)
	}
	if n := len(k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())); n != 0 {
		t.Fatalf("DLQ holds %d records, want none", n)
	}
}
