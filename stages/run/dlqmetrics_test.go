package run_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// designReasons are the six dlq.reason values of the DLQ header contract (docs/dead-letters.md).
var designReasons = []stages.Reason{stages.ReasonSanityFail, stages.ReasonDecodeError, stages.ReasonUnknownTaskType,
	stages.ReasonSinkRejected, stages.ReasonRetriesExhausted, stages.ReasonException}

// counterSeries returns the values of the series of counter name whose
// pipeline label is pipeline, keyed by the values of labels joined with
// "|".
func counterSeries(t *testing.T, g prometheus.Gatherer, name, pipeline string, labels ...string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			if ls["pipeline"] != pipeline {
				continue
			}
			key := make([]string, len(labels))
			for i, l := range labels {
				key[i] = ls[l]
			}
			out[strings.Join(key, "|")] = m.GetCounter().GetValue()
		}
	}
	return out
}

// sluice_dlq_records_by_reason_total has a series at 0 for each of the six
// reasons as soon as a runner is built, before any record: the first dead
// letter of a reason is then a change from 0 that increase() sees, while a
// sluice_dlq_records_total{reason,rule} series (its rule is open-ended)
// appears only with its first dead letter.
func TestDLQReasonsExportedAtZero(t *testing.T) {
	t.Parallel()
	withEachRunner(t, run.Config{Name: "p", Topics: []string{"in"}, DLQTopic: "in.dlq"}, func(t *testing.T, reg *prometheus.Registry) {
		if n, err := testutil.GatherAndCount(reg, "sluice_dlq_records_by_reason_total"); err != nil || n != len(designReasons) {
			t.Errorf("sluice_dlq_records_by_reason_total has %d series (%v), want %d", n, err, len(designReasons))
		}
		got := counterSeries(t, reg, "sluice_dlq_records_by_reason_total", "p", "reason")
		for _, r := range designReasons {
			if v, ok := got[string(r)]; !ok || v != 0 {
				t.Errorf("sluice_dlq_records_by_reason_total{pipeline=\"p\",reason=%q} = %v (exported %t), want 0", r, v, ok)
			}
		}
		if n, err := testutil.GatherAndCount(reg, "sluice_dlq_records_total"); err != nil || n != 0 {
			t.Errorf("sluice_dlq_records_total has %d series (%v) before any dead letter, want 0", n, err)
		}
	})
}

// checkDLQCounters checks that the DLQ counters of pipeline "test" agree
// with the dead letters on dlqTopic: sluice_dlq_records_total{reason,rule}
// has exactly their counts per (reason, rule) pair, and
// sluice_dlq_records_by_reason_total{reason} their counts per reason (0 for
// a design reason none of them has), i.e. the sum over rules of the first.
// It returns the dead letters' counts per (reason, rule).
func checkDLQCounters(t *testing.T, k *testkit.Kafka, reg prometheus.Gatherer, dlqTopic string) map[string]float64 {
	t.Helper()
	pairs, reasons := map[string]float64{}, map[string]float64{}
	for _, r := range designReasons {
		reasons[string(r)] = 0
	}
	for _, d := range k.ReadTopic(t, dlqTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted())) {
		hs := testkit.Headers(d)
		pairs[hs[stages.HeaderReason]+"|"+hs[stages.HeaderRule]]++
		reasons[hs[stages.HeaderReason]]++
	}
	if got := counterSeries(t, reg, "sluice_dlq_records_total", "test", "reason", "rule"); !maps.Equal(got, pairs) {
		t.Errorf("sluice_dlq_records_total{reason|rule} = %v, want the DLQ topic's counts %v", got, pairs)
	}
	if got := counterSeries(t, reg, "sluice_dlq_records_by_reason_total", "test", "reason"); !maps.Equal(got, reasons) {
		t.Errorf("sluice_dlq_records_by_reason_total{reason} = %v, want the DLQ topic's counts %v", got, reasons)
	}
	return pairs
}

// fateSink rejects every output whose value starts with "reject:", with the
// rule that follows; it implements run.Merger (the later output of a key
// wins) for coalescing windows.
type fateSink struct{}

func (fateSink) MergeKey(m msg) string { return m.Key }
func (fateSink) Merge(_, next msg) msg { return next }
func (fateSink) Write(_ context.Context, batch []msg) error {
	var rej stages.Rejections
	for i, m := range batch {
		if rule, ok := strings.CutPrefix(m.Value, "reject:"); ok {
			rej.Items = append(rej.Items, stages.Rejection{Index: i, Rule: rule, Err: errors.New("value out of range")})
		}
	}
	if len(rej.Items) == 0 {
		return nil
	}
	return &rej
}

// fateDecode fails the value "decode".
func fateDecode(_, v []byte) (string, error) {
	if string(v) == "decode" {
		return "", errors.New("not JSON")
	}
	return string(v), nil
}

// fate is the stage outcome a record's value asks for: "unknown",
// "sanity:RULE", "panic", "retry:RULE" (retried until exhausted), anything
// else passes.
func fate(m msg) error {
	switch v := m.Value; {
	case v == "unknown":
		return stages.DeadLetter(stages.ReasonUnknownTaskType, "", errors.New("no task_type"))
	case strings.HasPrefix(v, "sanity:"):
		return stages.DeadLetter(stages.ReasonSanityFail, strings.TrimPrefix(v, "sanity:"), errors.New("bad field"))
	case v == "panic":
		panic("stage bug")
	case strings.HasPrefix(v, "retry:"):
		return &stages.Error{Kind: stages.KindRetry, Rule: strings.TrimPrefix(v, "retry:"), Err: errors.New("dependency down")}
	}
	return nil
}

// fateValues are the values of a mixed run: every DLQ reason, several
// rules of a reason, and records that pass.
var fateValues = []string{
	"ok", "decode", "unknown", "sanity:ta.price", "sanity:ta.symbol", "sanity:ta.price", "panic",
	"retry:dep.timeout", "reject:pg.22003", "reject:pg.23505", "ok", "reject:pg.22003", "decode", "retry:",
}

// produceFates produces fateValues rounds times, each record under its own
// key except the "reject:pg.22003" ones, which share one key per round (a
// coalescing window merges them into one rejected output).
func produceFates(t *testing.T, cl *kgo.Client, topic string, rounds int) {
	t.Helper()
	var recs []*kgo.Record
	for r := range rounds {
		for i, v := range fateValues {
			key := fmt.Sprintf("k-%d-%d", r, i)
			if v == "reject:pg.22003" {
				key = fmt.Sprintf("k-%d-pg", r)
			}
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(v)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// After a mixed run (every DLQ reason, several rules), the runtime's two
// DLQ counters agree with each other and with the dead letters produced,
// in the batch path, the coalescing-window path and the transactional
// runner (which did not count its dead letters at all).
func TestDLQCountersAgreeAfterMixedRun(t *testing.T) {
	t.Parallel()
	const rounds = 3
	wantPairs := map[string]float64{ // per round, as in fateValues
		"decode_error|": 2, "unknown_task_type|": 1, "sanity_fail|ta.price": 2, "sanity_fail|ta.symbol": 1,
		"exception|": 1, "retries_exhausted|dep.timeout": 1, "retries_exhausted|": 1,
		"sink_rejected|pg.22003": 2, "sink_rejected|pg.23505": 1,
	}
	for k := range wantPairs {
		wantPairs[k] *= rounds
	}
	stage := func(_ context.Context, m msg) ([]msg, error) {
		if err := fate(m); err != nil {
			return nil, err
		}
		return []msg{m}, nil
	}
	for _, tc := range []struct {
		name   string
		window bool
	}{{"batch", false}, {"window", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := testkit.NewKafka(t, testkit.FakeOK())
			cfg := baseConfig(t, k, 2)
			if tc.window {
				cfg.Window = run.WindowConfig{MaxKeys: 1000, MaxAge: 50 * time.Millisecond}
			}
			cl, adm := k.Client(t), k.Admin(t)
			produceFates(t, cl, cfg.Topics[0], rounds)
			reg := prometheus.NewRegistry()
			r, err := run.New(cfg, fateDecode, stage, stages.Sink[msg](fateSink{}), run.WithRegisterer(reg),
				run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond)))
			if err != nil {
				t.Fatal(err)
			}
			stop := testkit.RunInBackground(t, "runner", r.Run)
			waitCommittedAtEnd(t, adm, cfg.Group, cfg.Topics[0], 60*time.Second)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if got := checkDLQCounters(t, k, reg, cfg.DLQTopic); !maps.Equal(got, wantPairs) {
				t.Errorf("dead letters per reason|rule %v, want %v", got, wantPairs)
			}
		})
	}
	t.Run("transactional", func(t *testing.T) {
		t.Parallel()
		k := testkit.NewKafka(t, testkit.ForceFake())
		cfg := baseConfig(t, k, 2)
		maxBytes := "16384"
		outTopic := k.Topic(t, "out", 1, map[string]*string{"max.message.bytes": &maxBytes})
		cl, adm := k.Client(t), k.Admin(t)
		produceFates(t, cl, cfg.Topics[0], rounds)
		// The transactional runner has no sink: a "reject:" record's output
		// is too large for the output topic, which dead-letters the record
		// as sink_rejected, rule kafka.too_large.
		rng := rand.New(rand.NewPCG(7, 8))
		txStage := func(_ context.Context, m msg) ([]*kgo.Record, error) {
			if err := fate(m); err != nil {
				return nil, err
			}
			v := []byte(m.Value)
			if strings.HasPrefix(m.Value, "reject:") {
				v = make([]byte, 64<<10)
				for i := range v {
					v[i] = byte(rng.Uint32()) // incompressible
				}
			}
			return []*kgo.Record{{Topic: outTopic, Key: []byte(m.Key), Value: v}}, nil
		}
		reg := prometheus.NewRegistry()
		r, err := run.NewTransactional(cfg, testkit.Name(t, "txn"), fateDecode, txStage,
			run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)), run.WithRegisterer(reg))
		if err != nil {
			t.Fatal(err)
		}
		stop := testkit.RunInBackground(t, "txn runner", r.Run)
		waitCommittedAtEnd(t, adm, cfg.Group, cfg.Topics[0], 60*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		want := maps.Clone(wantPairs)
		delete(want, "sink_rejected|pg.22003")
		delete(want, "sink_rejected|pg.23505")
		want["sink_rejected|kafka.too_large"] = 3 * rounds
		if got := checkDLQCounters(t, k, reg, cfg.DLQTopic); !maps.Equal(got, want) {
			t.Errorf("dead letters per reason|rule %v, want %v", got, want)
		}
	})
}
