package run_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// wantDead is the classification expected on the dead letter of one
// source offset.
type wantDead struct {
	reason stages.Reason
	rule   string
	errHas string // substring of dlq.error
}

// checkDeadLetters reads the DLQ and checks it holds exactly one dead
// letter per offset of want, with its reason, rule, error and stage, and
// that sluice_dlq_records_total counted each (reason, rule) pair.
func checkDeadLetters(t *testing.T, k *testkit.Kafka, reg prometheus.Gatherer, dlqTopic string, want map[int64]wantDead) {
	t.Helper()
	dlq := k.ReadTopic(t, dlqTopic, testkit.ReadCommitted())
	if len(dlq) != len(want) {
		t.Fatalf("DLQ holds %d records, want %d", len(dlq), len(want))
	}
	counts := map[[2]string]float64{}
	for _, d := range dlq {
		hs := testkit.Headers(d)
		off, err := strconv.ParseInt(hs[stages.HeaderSourceOffset], 10, 64)
		if err != nil {
			t.Fatalf("dlq.source.offset %q: %v", hs[stages.HeaderSourceOffset], err)
		}
		w, ok := want[off]
		if !ok {
			t.Fatalf("unexpected dead letter of offset %d: %v", off, hs)
		}
		if hs[stages.HeaderReason] != string(w.reason) || hs[stages.HeaderRule] != w.rule ||
			!strings.Contains(hs[stages.HeaderError], w.errHas) || hs[stages.HeaderStage] != "test/sink" {
			t.Errorf("offset %d: reason %q rule %q error %q stage %q, want %q %q (error containing %q) test/sink",
				off, hs[stages.HeaderReason], hs[stages.HeaderRule], hs[stages.HeaderError], hs[stages.HeaderStage], w.reason, w.rule, w.errHas)
		}
		counts[[2]string{string(w.reason), w.rule}]++
	}
	for l, n := range counts {
		if got := testkit.Metric(t, reg, "sluice_dlq_records_total", "reason", l[0], "rule", l[1]); got != n {
			t.Errorf("sluice_dlq_records_total{reason=%q,rule=%q} = %v, want %v", l[0], l[1], got, n)
		}
	}
}

// A sink rejection whose error is a dead letter (a sink passing on a
// caller's stages.DeadLetter, as kafkasink does) is dead-lettered with that
// reason, and with its rule when the rejection names none; a plain
// rejection, a retry-classified one and a dead letter with a reason outside
// the design's vocabulary stay sink_rejected.
func TestSinkRejectionKeepsDeadLetterReason(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cl, adm := k.Client(t), k.Admin(t)
	const n = 8
	produce(t, cl, cfg.Topics[0], n, 3, nil)
	rejectOf := map[string]stages.Rejection{
		"v-1": {Err: fmt.Errorf("sink: map: %w", stages.DeadLetter(stages.ReasonSanityFail, "out.amount", errors.New("amount negative")))},
		"v-2": {Rule: "pg.23505.uniq", Err: errors.New("duplicate key")},
		"v-3": {Rule: "sink.rule", Err: stages.DeadLetter(stages.ReasonDecodeError, "inner.rule", errors.New("bad bytes"))},
		"v-4": {Err: stages.DeadLetter("not_a_reason", "odd.rule", errors.New("odd"))},
		"v-5": {Rule: "sink.retry", Err: stages.Retry(errors.New("flaky"))},
	}
	sink := memsink.New(memsink.WithFailure(func(batch []msg, _ int) error {
		var rej stages.Rejections
		for i, m := range batch {
			if r, ok := rejectOf[m.Value]; ok {
				r.Index = i
				rej.Items = append(rej.Items, r)
			}
		}
		if len(rej.Items) == 0 {
			return nil
		}
		return &rej
	}))
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, passthrough, stages.Sink[msg](sink), run.WithRegisterer(reg))
	waitCommittedAtEnd(t, adm, cfg.Group, cfg.Topics[0], 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkDeadLetters(t, k, reg, cfg.DLQTopic, map[int64]wantDead{
		1: {stages.ReasonSanityFail, "out.amount", "amount negative"},
		2: {stages.ReasonSinkRejected, "pg.23505.uniq", "duplicate key"},
		3: {stages.ReasonDecodeError, "sink.rule", "bad bytes"},
		4: {stages.ReasonSinkRejected, "odd.rule", "odd"},
		5: {stages.ReasonSinkRejected, "sink.retry", "flaky"},
	})
	if got := sink.Len(); got != n-len(rejectOf) {
		t.Errorf("sink holds %d items, want %d", got, n-len(rejectOf))
	}
}

// deadLetterTallySink is a tallySink whose rejection of its reject key
// carries no rule and a dead-letter error.
type deadLetterTallySink struct {
	*tallySink
	err error
}

func (s *deadLetterTallySink) Write(ctx context.Context, batch []tally) error {
	err := s.tallySink.Write(ctx, batch)
	var rej *stages.Rejections
	if errors.As(err, &rej) {
		for i := range rej.Items {
			rej.Items[i].Rule, rej.Items[i].Err = "", s.err
		}
	}
	return err
}

// With coalescing windows, every record behind a merged output the sink
// rejects with a dead-letter error is dead-lettered with that error's
// reason and rule.
func TestWindowRejectionKeepsDeadLetterReason(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.Window = run.WindowConfig{MaxKeys: 1000, MaxAge: time.Minute}
	cl, adm := k.Client(t), k.Admin(t)
	const n, keys = 40, 4
	recs := produce(t, cl, cfg.Topics[0], n, keys, nil)
	sink := &deadLetterTallySink{
		tallySink: &tallySink{state: map[string]tally{}, reject: "k-3"},
		err:       stages.DeadLetter(stages.ReasonSanityFail, "tally.range", errors.New("count out of range")),
	}
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, toTally, stages.Sink[tally](sink), run.WithRegisterer(reg))
	waitCommittedAtEnd(t, adm, cfg.Group, cfg.Topics[0], 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	want := map[int64]wantDead{}
	for _, r := range recs {
		if string(r.Key) == "k-3" {
			want[r.Offset] = wantDead{stages.ReasonSanityFail, "tally.range", "count out of range"}
		}
	}
	checkDeadLetters(t, k, reg, cfg.DLQTopic, want)
}

// callTimes records when a sink was called.
type callTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (c *callTimes) add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, time.Now())
	return len(c.at)
}

func (c *callTimes) get() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at...)
}

// retryAfterWait is the wait the RetryAfter tests ask for: far above
// baseConfig's sink backoff (20ms → 100ms), so that a retry after the
// backoff alone is told apart with a wide margin.
const retryAfterWait = 1500 * time.Millisecond

// checkRetriedAfter checks that the second Write came at least (about)
// retryAfterWait after the first, and that the retry was counted.
func checkRetriedAfter(t *testing.T, calls *callTimes, reg prometheus.Gatherer) {
	t.Helper()
	at := calls.get()
	if len(at) < 2 {
		t.Fatalf("%d Write calls, want at least 2", len(at))
	}
	// A lower bound only, with a wide margin below the 1.5s asked for: a
	// retry after the backoff alone comes after at most 120ms.
	if gap := at[1].Sub(at[0]); gap < time.Second {
		t.Errorf("second Write %v after the first, want at least the RetryAfter wait (%v)", gap, retryAfterWait)
	}
	if got := testkit.Metric(t, reg, "sluice_retries_total", "kind", "sink"); got != 1 {
		t.Errorf("sluice_retries_total{kind=sink} = %v, want 1", got)
	}
	if got := testkit.Metric(t, reg, "sluice_dlq_records_total"); got != 0 {
		t.Errorf("a transient failure dead-lettered %v records", got)
	}
}

// A sink error classified stages.RetryAfter is retried after the error's
// wait, not after the (much shorter) sink backoff, and nothing is committed
// before the retry succeeded.
func TestSinkRetryAfterWaitIsHonoured(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cl, adm := k.Client(t), k.Admin(t)
	const n = 10
	produce(t, cl, cfg.Topics[0], n, 3, nil)
	var calls callTimes
	var committedEarly []map[int32]int64
	sink := memsink.New(memsink.WithFailure(func(_ []msg, write int) error {
		calls.add()
		if write == 1 {
			return stages.RetryAfter(retryAfterWait, errors.New("rate limited"))
		}
		if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); len(c) != 0 {
			committedEarly = append(committedEarly, c)
		}
		return nil
	}))
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, passthrough, stages.Sink[msg](sink), run.WithRegisterer(reg))
	waitCommittedAtEnd(t, adm, cfg.Group, cfg.Topics[0], 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkRetriedAfter(t, &calls, reg)
	if len(committedEarly) > 0 {
		t.Errorf("offsets committed before the retried write: %v", committedEarly)
	}
	if sink.Len() != n {
		t.Errorf("sink holds %d items, want %d", sink.Len(), n)
	}
}

// retryAfterTallySink is a tallySink whose first Write fails with a
// RetryAfter error.
type retryAfterTallySink struct {
	*tallySink
	calls *callTimes
}

func (s *retryAfterTallySink) Write(ctx context.Context, batch []tally) error {
	if s.calls.add() == 1 {
		return stages.RetryAfter(retryAfterWait, errors.New("rate limited"))
	}
	return s.tallySink.Write(ctx, batch)
}

// With coalescing windows, a window write failing with a RetryAfter error
// is retried after the error's wait.
func TestWindowSinkRetryAfterWaitIsHonoured(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.Window = run.WindowConfig{MaxKeys: 1000, MaxAge: time.Minute}
	cl, adm := k.Client(t), k.Admin(t)
	const n = 20
	produce(t, cl, cfg.Topics[0], n, 4, nil)
	var calls callTimes
	sink := &retryAfterTallySink{tallySink: &tallySink{state: map[string]tally{}}, calls: &calls}
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, toTally, stages.Sink[tally](sink), run.WithRegisterer(reg))
	waitCommittedAtEnd(t, adm, cfg.Group, cfg.Topics[0], 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkRetriedAfter(t, &calls, reg)
	if got := sink.total(); got != n {
		t.Errorf("sink holds %d records, want %d", got, n)
	}
}

// A RetryAfter wait (here one hour, above the cap) does not hold up a
// shutdown: the worker stops waiting at once, commits nothing past the
// failing batch, and Run returns.
func TestSinkRetryAfterInterruptedByShutdown(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, cfg.Topics[0], 5, 3, nil)
	var calls callTimes
	sink := memsink.New(memsink.WithFailure(func(_ []msg, _ int) error {
		calls.add()
		return stages.RetryAfter(time.Hour, errors.New("rate limited"))
	}))
	_, stop := start(t, k, cfg, passthrough, stages.Sink[msg](sink))
	testkit.WaitFor(t, 30*time.Second, "a failed write", func() bool { return len(calls.get()) > 0 })
	t0 := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Generous: the wait ends at once; the bound only tells it apart from
	// the hour asked for and from RevokeTimeout's 20s abandon.
	if d := time.Since(t0); d > 15*time.Second {
		t.Errorf("shutdown took %v during a RetryAfter wait", d)
	}
	if n := len(calls.get()); n != 1 {
		t.Errorf("%d Write calls, want 1 (no retry before the hour)", n)
	}
	if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); len(c) != 0 {
		t.Errorf("committed %v, want nothing", c)
	}
}
