package run_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// Tests of the stage vocabulary as the runtime carries it out: outputs
// with a dead letter (stages.DeadLetterWith), attempt numbers
// (Msg.Attempt, Msg.LastAttempt, Msg.PrevErr) and waits (stages.Wait).

// vocabOutcome is what the vocabulary stage does with a record value.
type vocabOutcome struct {
	outs   []string // the outputs written (value suffixes)
	reason stages.Reason
	rule   string // with reason: the record is dead-lettered
}

// vocabStage returns, per value: "ok" one output; "dlw" two outputs and
// a dead letter (DeadLetterWith, sanity_fail, rule vocab.partial); "dl"
// outputs with a plain DeadLetter (not written; exception, no rule);
// "drop" nothing. want gives the expected outcome of each.
func vocabStage() (stage stages.Func[string, msg], want map[string]vocabOutcome) {
	want = map[string]vocabOutcome{
		"ok":   {outs: []string{"ok/out"}},
		"dlw":  {outs: []string{"dlw/state", "dlw/event"}, reason: stages.ReasonSanityFail, rule: "vocab.partial"},
		"dl":   {reason: stages.ReasonException},
		"drop": {},
	}
	return func(_ context.Context, m msg) ([]msg, error) {
		out := func(suffix ...string) []msg {
			var o []msg
			for _, s := range suffix {
				c := m
				c.Value = m.Value + "/" + s
				o = append(o, c)
			}
			return o
		}
		switch m.Value {
		case "ok":
			return out("out"), nil
		case "dlw":
			return stages.DeadLetterWith(out("state", "event"), stages.ReasonSanityFail, "vocab.partial", errors.New("partly failed"))
		case "dl":
			return out("ignored"), stages.DeadLetter(stages.ReasonException, "", errors.New("failed"))
		default:
			return nil, nil
		}
	}, want
}

// produceValues produces one record per value, in order, to partition 0 of
// topic (keys k-i), and returns them.
func produceValues(t *testing.T, cl *kgo.Client, topic string, values []string) []*kgo.Record {
	t.Helper()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Topic: topic, Partition: 0, Key: []byte(fmt.Sprintf("k-%d", i)), Value: []byte(v)}
	}
	if err := cl.ProduceSync(testkit.Context(t), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	return recs
}

// checkVocabDLQ checks that the DLQ holds exactly one dead letter per
// value of values that want dead-letters, each keeping its record's key
// and value and carrying its reason, rule and stage, and that both DLQ
// counters counted them.
func checkVocabDLQ(t *testing.T, k *testkit.Kafka, reg prometheus.Gatherer, dlqTopic, stage string, recs []*kgo.Record, want map[string]vocabOutcome) {
	t.Helper()
	byOffset := map[string]*kgo.Record{}
	for _, d := range k.ReadTopic(t, dlqTopic, testkit.ReadCommitted()) {
		off, _ := testkit.Header(d, stages.HeaderSourceOffset)
		if byOffset[off] != nil {
			t.Errorf("two dead letters of offset %s", off)
		}
		byOffset[off] = d
	}
	counts := map[[2]string]float64{}
	dead := 0
	for _, r := range recs {
		w := want[string(r.Value)]
		d := byOffset[fmt.Sprint(r.Offset)]
		if w.reason == "" {
			if d != nil {
				t.Errorf("%s (offset %d) dead-lettered, want not", r.Value, r.Offset)
			}
			continue
		}
		dead++
		if d == nil {
			t.Errorf("%s (offset %d) not dead-lettered", r.Value, r.Offset)
			continue
		}
		hs := testkit.Headers(d)
		if string(d.Key) != string(r.Key) || string(d.Value) != string(r.Value) ||
			hs[stages.HeaderReason] != string(w.reason) || hs[stages.HeaderRule] != w.rule || hs[stages.HeaderStage] != stage ||
			hs[stages.HeaderAttempts] != "1" || hs[stages.HeaderSourceTopic] != r.Topic || hs[stages.HeaderError] == "" || hs[stages.HeaderFailedAt] == "" {
			t.Errorf("dead letter of %s: %s=%s %v; want the record's key and value, reason %q rule %q stage %q, 1 attempt",
				r.Value, d.Key, d.Value, hs, w.reason, w.rule, stage)
		}
		counts[[2]string{string(w.reason), w.rule}]++
	}
	if len(byOffset) != dead {
		t.Errorf("DLQ holds %d records, want %d", len(byOffset), dead)
	}
	for l, n := range counts {
		if got := testkit.Metric(t, reg, "sluice_dlq_records_total", "reason", l[0], "rule", l[1]); got != n {
			t.Errorf("sluice_dlq_records_total{reason=%q,rule=%q} = %v, want %v", l[0], l[1], got, n)
		}
		if got := testkit.Metric(t, reg, "sluice_dlq_records_by_reason_total", "reason", l[0]); got != n {
			t.Errorf("sluice_dlq_records_by_reason_total{reason=%q} = %v, want %v", l[0], got, n)
		}
	}
}

// wantOutputs returns the outputs want expects for values, in order.
func wantOutputs(values []string, want map[string]vocabOutcome) []string {
	var out []string
	for _, v := range values {
		out = append(out, want[v].outs...)
	}
	return out
}

// One batch mixing outputs, a dead letter with outputs (DeadLetterWith), a
// plain dead letter returned with outputs and a drop: the sink gets every
// output of the first two (in order), the DLQ the dead letters of the
// second and third, both counted, and the whole batch commits — with the
// batch runner, with a coalescing window, and with the transactional
// runner.
func TestDeadLetterWithOutputsInOneBatch(t *testing.T) {
	t.Parallel()
	values := []string{"ok", "dlw", "dl", "drop", "ok", "dlw", "ok"}
	for _, windowed := range []bool{false, true} {
		t.Run(map[bool]string{false: "batch", true: "window"}[windowed], func(t *testing.T) {
			t.Parallel()
			k := testkit.NewKafka(t, testkit.FakeOK())
			cfg := baseConfig(t, k, 1)
			cfg.BatchMaxRecords = len(values)
			cfg.BatchLinger = time.Second // one batch
			var sink stages.Sink[msg] = memsink.New[msg]()
			if windowed {
				cfg.Window = run.WindowConfig{MaxKeys: 100, MaxAge: time.Second}
				sink = mergeSink{memsink.New[msg]()}
			}
			recs := produceValues(t, k.Client(t), cfg.Topics[0], values)
			stage, want := vocabStage()
			reg := prometheus.NewRegistry()
			_, stop := start(t, k, cfg, stage, sink, run.WithRegisterer(reg), run.WithStageName("vocab"))
			waitCommittedAtEnd(t, k.Admin(t), cfg.Group, cfg.Topics[0], 30*time.Second)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range sinkItems(sink) {
				got = append(got, m.Value)
			}
			if w := wantOutputs(values, want); !slices.Equal(got, w) {
				t.Errorf("sink got %q, want %q", got, w)
			}
			checkVocabDLQ(t, k, reg, cfg.DLQTopic, "vocab", recs, want)
			if got, w := testkit.Metric(t, reg, "sluice_records_out_total"), float64(len(wantOutputs(values, want))); got != w {
				t.Errorf("sluice_records_out_total = %v, want %v", got, w)
			}
		})
	}
	t.Run("transactional", func(t *testing.T) {
		t.Parallel()
		k := testkit.NewKafka(t, testkit.FakeOK())
		cfg := baseConfig(t, k, 1)
		outTopic := k.Topic(t, "out", 1)
		recs := produceValues(t, k.Client(t), cfg.Topics[0], values)
		stage, want := vocabStage()
		txStage := func(ctx context.Context, m msg) ([]*kgo.Record, error) {
			outs, err := stage(ctx, m)
			var recs []*kgo.Record
			for _, o := range outs {
				recs = append(recs, &kgo.Record{Topic: outTopic, Key: []byte(o.Key), Value: []byte(o.Value)})
			}
			return recs, err
		}
		reg := prometheus.NewRegistry()
		r, err := run.NewTransactional(cfg, testkit.Name(t, "tx"), decodeString, txStage,
			run.WithKafkaOpts(k.Opts(t)...), run.WithRegisterer(reg), run.WithStageName("vocab"))
		if err != nil {
			t.Fatal(err)
		}
		stop := testkit.RunInBackground(t, "transactional runner", r.Run)
		waitCommittedAtEnd(t, k.Admin(t), cfg.Group, cfg.Topics[0], 30*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range k.ReadTopic(t, outTopic) {
			got = append(got, string(o.Value))
		}
		if w := wantOutputs(values, want); !slices.Equal(got, w) {
			t.Errorf("output topic holds %q, want %q", got, w)
		}
		checkVocabDLQ(t, k, reg, cfg.DLQTopic, "vocab", recs, want)
	})
}

// mergeSink is a memory sink that implements run.Merger without merging
// distinct outputs (its key is the output's key and value).
type mergeSink struct{ *memsink.Sink[msg] }

func (mergeSink) MergeKey(m msg) string { return m.Key + "/" + m.Value }
func (mergeSink) Merge(_, next msg) msg { return next }

// sinkItems returns what a memsink or a mergeSink holds.
func sinkItems(s stages.Sink[msg]) []msg {
	switch s := s.(type) {
	case *memsink.Sink[msg]:
		return s.Items()
	case mergeSink:
		return s.Items()
	}
	panic(fmt.Sprintf("unexpected sink %T", s))
}

// call is one stage call as the stage saw it.
type call struct {
	attempt, max int
	last         bool
	prev         error
}

// callLog records the stage calls of each record value; safe for
// concurrent use.
type callLog struct {
	mu    sync.Mutex
	calls map[string][]call
}

func (l *callLog) add(m msg) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls == nil {
		l.calls = map[string][]call{}
	}
	l.calls[m.Value] = append(l.calls[m.Value], call{m.Attempt, m.MaxAttempts, m.LastAttempt(), m.PrevErr})
	return len(l.calls[m.Value])
}

func (l *callLog) of(v string) []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls[v])
}

func attempts(cs []call) []int {
	var out []int
	for _, c := range cs {
		out = append(out, c.attempt)
	}
	return out
}

// Msg.Attempt counts the calls of a record's stage from 1, one more per
// retry; Msg.MaxAttempts is the retry policy's bound, LastAttempt is true at
// it only, and PrevErr is the previous call's error. A record that recovers
// is written; one that fails at every attempt is dead-lettered with
// dlq.attempts = MaxAttempts.
func TestAttemptIncrementsAcrossRetries(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1) // MaxAttempts 3
	produceValues(t, k.Client(t), cfg.Topics[0], []string{"recovers", "fails", "fine"})
	var log callLog
	stage := func(_ context.Context, m msg) ([]msg, error) {
		n := log.add(m)
		switch {
		case m.Value == "recovers" && n < 3:
			return nil, fmt.Errorf("call %d: %w", n, errFlaky)
		case m.Value == "fails":
			return nil, stages.Retry(fmt.Errorf("call %d: %w", n, errFlaky))
		}
		return []msg{m}, nil
	}
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, sink)
	waitCommittedAtEnd(t, k.Admin(t), cfg.Group, cfg.Topics[0], 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"recovers", "fails"} {
		cs := log.of(v)
		if got := attempts(cs); !slices.Equal(got, []int{1, 2, 3}) {
			t.Fatalf("%s: attempts %v, want [1 2 3]", v, got)
		}
		for i, c := range cs {
			if c.max != 3 || c.last != (i == 2) {
				t.Errorf("%s call %d: MaxAttempts %d, LastAttempt %t; want 3, %t", v, i+1, c.max, c.last, i == 2)
			}
			wantPrev := fmt.Sprintf("call %d: flaky", i)
			if i == 0 && c.prev != nil || i > 0 && (!errors.Is(c.prev, errFlaky) || !strings.Contains(c.prev.Error(), wantPrev)) {
				t.Errorf("%s call %d: PrevErr %v, want nil at the first call, then the previous call's error (%q)", v, i+1, c.prev, wantPrev)
			}
		}
	}
	if got := attempts(log.of("fine")); !slices.Equal(got, []int{1}) {
		t.Errorf("fine: attempts %v, want [1]", got)
	}
	var got []string
	for _, m := range sink.Items() {
		got = append(got, m.Value)
	}
	if !slices.Equal(got, []string{"recovers", "fine"}) {
		t.Errorf("sink got %q, want [recovers fine]", got)
	}
	dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d records, want 1", len(dlq))
	}
	hs := testkit.Headers(dlq[0])
	if string(dlq[0].Value) != "fails" || hs[stages.HeaderReason] != string(stages.ReasonRetriesExhausted) || hs[stages.HeaderAttempts] != "3" {
		t.Errorf("dead letter %s %v, want fails, retries_exhausted after 3 attempts", dlq[0].Value, hs)
	}
}

var errFlaky = errors.New("flaky")

// A stage that waits (stages.Wait) spends no attempt: after more waits
// than MaxAttempts the record still gets its MaxAttempts real attempts,
// each wait calls the stage again with the same attempt number, and the
// waits are counted (sluice_runtime_waits_total, and the time waited in
// sluice_runtime_wait_seconds_total) apart from retries. Meanwhile only the
// waiting record's partition is paused: the other partition keeps
// flowing to its end and commits.
func TestWaitSpendsNoAttemptAndPausesOnlyItsPartition(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 2) // MaxAttempts 3
	const minWaits, wait = 7, 20 * time.Millisecond
	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	recs = append(recs, &kgo.Record{Topic: cfg.Topics[0], Partition: 0, Key: []byte("w"), Value: []byte("waits")})
	for i := range 200 {
		recs = append(recs, &kgo.Record{Topic: cfg.Topics[0], Partition: 1, Key: []byte("f"), Value: []byte(fmt.Sprintf("flows-%d", i))})
	}
	if err := cl.ProduceSync(testkit.Context(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var log callLog
	var released atomic.Bool
	stage := func(_ context.Context, m msg) ([]msg, error) {
		if m.Value != "waits" {
			return []msg{m}, nil
		}
		n := log.add(m)
		if !released.Load() {
			return nil, stages.Wait(wait, fmt.Errorf("wait %d: %w", n, errRateLimited))
		}
		return nil, stages.Retry(errFlaky)
	}
	sink := memsink.New[msg]()
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, stage, sink, run.WithRegisterer(reg))
	testkit.WaitFor(t, 60*time.Second, "the other partition written to its end", func() bool { return sink.Len() == 200 })
	testkit.WaitFor(t, 30*time.Second, "more waits than attempts", func() bool { return len(log.of("waits")) >= minWaits })
	testkit.WaitFor(t, 30*time.Second, "the waiting partition paused, and it alone", func() bool {
		return testkit.Metric(t, reg, "sluice_paused_partitions") == 1
	})
	testkit.WaitFor(t, 30*time.Second, "partition 1 committed to its end", func() bool {
		return testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])[1] == 200
	})
	if got := testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0]); got[0] != 0 {
		t.Errorf("partition 0 committed at %d while its first record waits", got[0])
	}
	released.Store(true)
	waitCommittedAtEnd(t, k.Admin(t), cfg.Group, cfg.Topics[0], 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	waits := int(testkit.Metric(t, reg, "sluice_runtime_waits_total"))
	cs := log.of("waits")
	if waits < minWaits || len(cs) != waits+3 {
		t.Fatalf("%d calls and %d waits, want at least %d waits and 3 calls more", len(cs), waits, minWaits)
	}
	want := slices.Repeat([]int{1}, waits+1) // the waits and the first real attempt
	want = append(want, 2, 3)
	if got := attempts(cs); !slices.Equal(got, want) {
		t.Fatalf("attempts %v, want %v", got, want)
	}
	for i := 1; i <= waits; i++ {
		if !errors.Is(cs[i].prev, errRateLimited) {
			t.Errorf("call %d: PrevErr %v, want the wait of the call before", i+1, cs[i].prev)
		}
	}
	dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d records, want 1", len(dlq))
	}
	if hs := testkit.Headers(dlq[0]); hs[stages.HeaderReason] != string(stages.ReasonRetriesExhausted) || hs[stages.HeaderAttempts] != "3" {
		t.Errorf("dead letter headers %v, want retries_exhausted after 3 attempts", hs)
	}
	if got := testkit.Metric(t, reg, "sluice_runtime_wait_seconds_total"); got < float64(waits)*wait.Seconds() {
		t.Errorf("sluice_runtime_wait_seconds_total = %v, want ≥ %v", got, float64(waits)*wait.Seconds())
	}
	if got := testkit.Metric(t, reg, "sluice_retries_total", "kind", "stage"); got != 2 {
		t.Errorf("sluice_retries_total{kind=stage} = %v, want 2 (waits are not retries)", got)
	}
	if got := testkit.Metric(t, reg, "sluice_paused_partitions"); got != 0 {
		t.Errorf("sluice_paused_partitions = %v at the end, want 0", got)
	}
}

var errRateLimited = errors.New("rate limited")

// A long wait ends as soon as the runner stops: Run returns without
// waiting it out, and the waiting record is neither committed nor
// dead-lettered (it is redelivered).
func TestWaitEndsOnStop(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	produceValues(t, k.Client(t), cfg.Topics[0], []string{"done", "waits"})
	var waiting atomic.Bool
	stage := func(_ context.Context, m msg) ([]msg, error) {
		if m.Value == "waits" {
			waiting.Store(true)
			return nil, stages.Wait(time.Hour, errRateLimited)
		}
		return []msg{m}, nil
	}
	sink := memsink.New[msg]()
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, stage, sink, run.WithRegisterer(reg))
	testkit.WaitFor(t, 30*time.Second, "the record waiting", waiting.Load)
	t0 := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("stop took %v with a record in a one-hour wait, want it to end the wait", d)
	}
	if got := testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0]); got[0] != 1 {
		t.Errorf("committed offset %v, want 1 (the waiting record left for redelivery)", got)
	}
	if n := len(k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())); n != 0 {
		t.Errorf("DLQ holds %d records, want none", n)
	}
	if got := testkit.Metric(t, reg, "sluice_runtime_waits_total"); got != 1 {
		t.Errorf("sluice_runtime_waits_total = %v, want 1", got)
	}
}

// A long wait ends as soon as its partition is revoked: when a second
// member joins, the first gives up a partition whose record is in a
// one-hour wait well before its RevokeTimeout, the record is not
// committed by it, and the new owner processes it.
func TestWaitEndsOnRevoke(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 2)
	cfg.RevokeTimeout = 40 * time.Second
	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range int32(2) {
		rec := &kgo.Record{Topic: cfg.Topics[0], Partition: p, Key: []byte("k"), Value: []byte(fmt.Sprint("p", p))}
		if err := cl.ProduceSync(testkit.Context(t), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var waiting sync.Map // partitions in a wait on the first member
	first := func(_ context.Context, m msg) ([]msg, error) {
		waiting.Store(m.Source.Partition, true)
		return nil, stages.Wait(time.Hour, errRateLimited)
	}
	_, stop1 := start(t, k, cfg, first, stages.Sink[msg](memsink.New[msg]()))
	testkit.WaitFor(t, 30*time.Second, "both records waiting on the first member", func() bool {
		_, a := waiting.Load(int32(0))
		_, b := waiting.Load(int32(1))
		return a && b
	})
	second := memsink.New[msg]()
	t0 := time.Now()
	_, stop2 := start(t, k, cfg, passthrough, stages.Sink[msg](second))
	// Well under RevokeTimeout, generous for a slow shared machine.
	testkit.WaitFor(t, 20*time.Second, "the second member to process a revoked partition's record", func() bool { return second.Len() > 0 })
	t.Logf("the revoked partition's record was processed %v after the second member started", time.Since(t0).Round(time.Millisecond))
	for _, stop := range []func() error{stop1, stop2} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())); n != 0 {
		t.Errorf("DLQ holds %d records, want none", n)
	}
}

// The wait counters exist at 0 from the start, for both runners.
func TestWaitCountersExportedAtZero(t *testing.T) {
	t.Parallel()
	withEachRunner(t, run.Config{Name: "p", Topics: []string{"in"}, DLQTopic: "in.dlq"}, func(t *testing.T, reg *prometheus.Registry) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]bool{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if m.GetCounter() != nil && m.GetCounter().GetValue() == 0 && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == "p" {
					found[mf.GetName()] = true
				}
			}
		}
		for _, name := range []string{"sluice_runtime_waits_total", "sluice_runtime_wait_seconds_total"} {
			if !found[name] {
				t.Errorf("%s{pipeline=\"p\"} is not exported at 0", name)
			}
		}
	})
}
