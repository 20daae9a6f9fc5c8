package run_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// A fatal error aborts the poll's transaction; after a restart every input
// appears exactly once in the output (read_committed), poison records in the
// DLQ, and the group's offsets are at the end.
func TestTransactionalExactlyOnceAcrossAbort(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 2)
	cfg.BatchMaxRecords = 1000
	outTopic := k.Topic(t, "out", 2)
	cl, adm := k.Client(t), k.Admin(t)
	const n = 200
	produce(t, cl, cfg.Topics[0], n, 20, func(i int) string {
		if i%50 == 7 {
			return "poison"
		}
		return "v"
	})
	var crashed atomic.Bool
	var seen atomic.Int32
	stage := func(ctx context.Context, m msg) ([]*kgo.Record, error) {
		if m.Value == "poison" {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "tx.poison", errors.New("poison"))
		}
		if seen.Add(1) == 120 && crashed.CompareAndSwap(false, true) {
			return nil, stages.Fatal(errors.New("simulated crash"))
		}
		return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: []byte(m.Source.Topic + "/" + itoa(m.Source.Partition) + "/" + itoa64(m.Source.Offset))}}, nil
	}
	runOnce := func() error {
		r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), decodeString, stage, run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- r.Run(ctx) }()
		deadline := time.After(60 * time.Second)
		for {
			select {
			case err := <-errc:
				return err
			case <-deadline:
				t.Fatal("transactional runner did not finish")
			case <-time.After(100 * time.Millisecond):
				if sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n {
					cancel()
					return <-errc
				}
			}
		}
	}
	if err := runOnce(); err == nil || !strings.Contains(err.Error(), "simulated crash") {
		t.Fatalf("first run = %v, want the simulated crash", err)
	}
	if err := runOnce(); err != nil {
		t.Fatalf("second run: %v", err)
	}
	out := k.ReadTopic(t, outTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	counts := map[string]int{}
	for _, r := range out {
		counts[string(r.Value)]++
	}
	for v, c := range counts {
		if c != 1 {
			t.Errorf("output %s visible %d times", v, c)
		}
	}
	const poison = 4
	if len(out) != n-poison {
		t.Fatalf("read %d committed outputs, want %d", len(out), n-poison)
	}
	dlq := k.ReadTopic(t, cfg.DLQTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if len(dlq) != poison {
		t.Fatalf("DLQ has %d committed records, want %d", len(dlq), poison)
	}
	if rule, _ := testkit.Header(dlq[0], stages.HeaderRule); rule != "tx.poison" {
		t.Fatalf("dlq.rule = %q", rule)
	}
}

func itoa(i int32) string   { return strconv.Itoa(int(i)) }
func itoa64(i int64) string { return strconv.FormatInt(i, 10) }
