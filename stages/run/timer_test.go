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

// firedPrefix marks the outputs of keyed timer firings.
const firedPrefix = "fired:"

// tallyTimerStage is tallyStage that also sets the key's timer, due at
// once, when its count reaches perKey.
func tallyTimerStage(store *run.Store[keyTally], perKey int) stages.Func[string, msg] {
	count := tallyStage(store)
	return func(ctx context.Context, m msg) ([]msg, error) {
		outs, err := count(ctx, m)
		if err != nil {
			return nil, err
		}
		st, _ := store.Of(ctx)
		if c, _ := st.Get(m.Key); c.N == perKey && m.Source.Offset == c.Next-1 {
			if err := st.SetTimer(m.Key, time.Now()); err != nil {
				return nil, err
			}
		}
		return outs, nil
	}
}

// countFirings is the timer function of the tally tests: it counts the
// firing in the key's state (unguarded, so a firing whose state write was
// lost and one applied twice would both show) and outputs firedPrefix+key
// from the partition it fired on.
func countFirings(store *run.Store[keyTally]) run.TimerFunc[msg] {
	return func(ctx context.Context, f run.Firing) ([]msg, error) {
		st, err := store.Of(ctx)
		if err != nil {
			return nil, err
		}
		c, ok := st.Get(f.Key)
		if !ok {
			return nil, stages.Fatal(fmt.Errorf("timer of %s fired without its entry", f.Key))
		}
		c.Fired++
		if err := st.Put(f.Key, c); err != nil {
			return nil, err
		}
		return []msg{{Key: firedPrefix + f.Key, Source: stages.Source{Partition: st.Partition()}}}, nil
	}
}

// Keyed timers fire on the member owning the key's partition only, once
// per key, and the firing's state write is committed with it.
func TestKeyedTimersFireOnOwner(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 4)
	const keys, perKey = 24, 5
	type member struct {
		sink *memsink.Sink[msg]
		reg  *prometheus.Registry
		stop func() error
	}
	var ms []*member
	for range 2 {
		store := newKeyTallies(t, changelog, nil)
		m := &member{sink: memsink.New[msg](), reg: prometheus.NewRegistry()}
		_, m.stop = start(t, k, cfg, tallyTimerStage(store, perKey), m.sink,
			run.WithStores(store), run.WithTimers(0, countFirings(store)), run.WithRegisterer(m.reg))
		ms = append(ms, m)
	}
	testkit.WaitFor(t, 60*time.Second, "two partitions on each member", func() bool {
		return testkit.Metric(t, ms[0].reg, "sluice_assigned_partitions") == 2 && testkit.Metric(t, ms[1].reg, "sluice_assigned_partitions") == 2
	})
	recs := produce(t, k.Client(t), cfg.Topics[0], keys*perKey, keys, nil)
	fired := func() map[string][]int {
		got := map[string][]int{}
		for i, m := range ms {
			for _, o := range m.sink.Items() {
				if key, ok := strings.CutPrefix(o.Key, firedPrefix); ok {
					got[key] = append(got[key], i)
				}
			}
		}
		return got
	}
	testkit.WaitFor(t, 60*time.Second, "every key's timer", func() bool { return len(fired()) == keys })
	for _, m := range ms {
		if err := m.stop(); err != nil {
			t.Fatal(err)
		}
	}
	// The member that fired a key's timer is the one its records went to.
	owner := map[string]int{}
	for i, m := range ms {
		for _, o := range m.sink.Items() {
			if o.Source.Topic != "" {
				owner[o.Key] = i
			}
		}
	}
	for key, on := range fired() {
		if len(on) != 1 || on[0] != owner[key] {
			t.Errorf("key %s fired on members %v, want once on member %d (its partition's owner)", key, on, owner[key])
		}
	}
	checkTallies(t, k, newKeyTallies(t, changelog, nil), wantTallies(recs), 1)
	total := 0.0
	for _, m := range ms {
		total += testkit.Metric(t, m.reg, "sluice_timer_firings_total", "timer", "tallies", "result", "ok")
	}
	if total != keys {
		t.Errorf("sluice_timer_firings_total{result=ok} = %v over both members, want %d", total, keys)
	}
}

// The periodic punctuation runs on the partition's worker: never while one
// of its batches or another of its firings runs, and its state writes are
// committed like a record's.
func TestPunctuationNeverOverlapsBatches(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 2)
	cfg.BatchMaxRecords = 10
	store := newKeyTallies(t, changelog, nil)
	var inside [2]atomic.Int32
	var overlaps, firings atomic.Int32
	enter := func(p int32) func() {
		if inside[p].Add(1) > 1 {
			overlaps.Add(1)
		}
		return func() { inside[p].Add(-1) }
	}
	count := tallyStage(store)
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		defer enter(m.Source.Partition)()
		time.Sleep(time.Millisecond) // widen the window an overlap would need
		return count(ctx, m)
	}
	punct := func(ctx context.Context, f run.Firing) ([]msg, error) {
		o, _ := run.Owner(ctx)
		defer enter(o.Partition)()
		time.Sleep(time.Millisecond)
		st, err := store.Of(ctx)
		if err != nil {
			return nil, err
		}
		if f.Key != "" || f.Store != "" {
			return nil, stages.Fatal(fmt.Errorf("unexpected keyed firing %v", f))
		}
		keys := 0
		st.Range("k-", func(string, keyTally) bool { keys++; return true })
		c, _ := st.Get("punctuations")
		c.N++
		firings.Add(1)
		return []msg{{Key: fmt.Sprintf("punct-%d", keys)}}, st.Put("punctuations", c)
	}
	reg := prometheus.NewRegistry()
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, sink, run.WithStores(store), run.WithTimers(5*time.Millisecond, punct), run.WithRegisterer(reg))
	recs := produce(t, k.Client(t), cfg.Topics[0], 400, 10, nil)
	testkit.WaitFor(t, 60*time.Second, "every record and 20 punctuations", func() bool {
		return sink.Len() >= len(recs)+20 && firings.Load() >= 20
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlaps of a punctuation with a batch or another punctuation of its partition", n)
	}
	got, err := newKeyTallies(t, changelog, nil).Read(testkit.Context(t), k.Opts(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	committed := 0
	for _, byKey := range got {
		committed += byKey["punctuations"].N
	}
	if committed == 0 || committed > int(firings.Load()) {
		t.Errorf("the changelog counts %d punctuations, want 1..%d", committed, firings.Load())
	}
	if ok := testkit.Metric(t, reg, "sluice_timer_firings_total", "timer", "periodic", "result", "ok"); ok != float64(firings.Load()) {
		t.Errorf("sluice_timer_firings_total{periodic,ok} = %v, want %d", ok, firings.Load())
	}
}

// A timer's retry error fires it again after the backoff, with the attempt
// counted; a dead-letter error drops the firing; a timer can be set only
// on an entry, and only when the runner has a timer function.
func TestTimerErrors(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 1)
	store := newKeyTallies(t, changelog, nil)
	var mu sync.Mutex
	attempts := map[string][]int{}
	var setErrs []string
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		st, err := store.Of(ctx)
		if err != nil {
			return nil, err
		}
		if err := st.SetTimer("nothing", time.Now()); err != nil {
			mu.Lock()
			setErrs = append(setErrs, err.Error())
			mu.Unlock()
		}
		if err := st.Put(m.Key, keyTally{N: 1}); err != nil {
			return nil, err
		}
		return nil, st.SetTimer(m.Key, time.Now())
	}
	timer := func(ctx context.Context, f run.Firing) ([]msg, error) {
		mu.Lock()
		attempts[f.Key] = append(attempts[f.Key], f.Attempt)
		mu.Unlock()
		switch {
		case f.Key == "retry" && f.Attempt < 3:
			return nil, stages.Retry(errors.New("not yet"))
		case f.Key == "drop":
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "", errors.New("never"))
		}
		return []msg{{Key: firedPrefix + f.Key}}, nil
	}
	for _, key := range []string{"retry", "drop"} {
		if err := k.Client(t).ProduceSync(testkit.Context(t), &kgo.Record{Topic: cfg.Topics[0], Key: []byte(key), Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, sink, run.WithStores(store), run.WithTimers(0, timer), run.WithRegisterer(reg))
	testkit.WaitFor(t, 30*time.Second, "the retried timer", func() bool { return sink.Len() == 1 })
	testkit.WaitFor(t, 30*time.Second, "the dropped firing counted", func() bool {
		return testkit.Metric(t, reg, "sluice_timer_firings_total", "timer", "tallies", "result", "dropped") == 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(attempts) != "map[drop:[1] retry:[1 2 3]]" {
		t.Errorf("timer calls %v, want retry attempts 1, 2, 3 and drop once", attempts)
	}
	if n := testkit.Metric(t, reg, "sluice_timer_firings_total", "timer", "tallies", "result", "retry"); n != 2 {
		t.Errorf("retries counted %v, want 2", n)
	}
	if len(setErrs) == 0 || !strings.Contains(setErrs[0], "has no value") {
		t.Errorf("SetTimer on a key without a value: %v", setErrs)
	}
	got, err := store.Read(testkit.Context(t), k.Opts(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0]) != 2 {
		t.Errorf("state %v, want the two entries", got)
	}

	// Without a timer function, SetTimer fails.
	cfg2, changelog2 := stateConfig(t, k, 1)
	store2 := newKeyTallies(t, changelog2, nil)
	errc := make(chan error, 1)
	stage2 := func(ctx context.Context, m msg) ([]msg, error) {
		st, err := store2.Of(ctx)
		if err != nil {
			return nil, err
		}
		if err := st.Put(m.Key, keyTally{}); err != nil {
			return nil, err
		}
		select {
		case errc <- st.SetTimer(m.Key, time.Now()):
		default:
		}
		return nil, nil
	}
	produce(t, k.Client(t), cfg2.Topics[0], 1, 1, nil)
	_, stop2 := start(t, k, cfg2, stage2, memsink.New[msg](), run.WithStores(store2))
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "no timer function") {
		t.Errorf("SetTimer without WithTimers: %v", err)
	}
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
}

// A timer function's Wait (a rate-limit denial) fires the timer again after
// the wait, without spending an attempt, and counts the firing as a wait:
// it is never dropped.
func TestTimerWaitFiresAgain(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 1)
	store := newKeyTallies(t, changelog, nil)
	timer, attempts := scriptedTimer(func(call int) error {
		if call <= 2 {
			return stages.Wait(20*time.Millisecond, errors.New("rate limited"))
		}
		return nil
	})
	produce(t, k.Client(t), cfg.Topics[0], 1, 1, nil)
	reg := prometheus.NewRegistry()
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, tallyTimerStage(store, 1), sink, run.WithStores(store), run.WithTimers(0, timer), run.WithRegisterer(reg))
	testkit.WaitFor(t, 30*time.Second, "the timer's output after its waits", func() bool {
		return slices.ContainsFunc(sink.Items(), func(m msg) bool { return strings.HasPrefix(m.Key, firedPrefix) })
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := attempts(); fmt.Sprint(got) != "[1 1 1]" {
		t.Errorf("timer calls with attempts %v, want three calls at attempt 1 (a wait spends no attempt)", got)
	}
	for res, want := range map[string]float64{"wait": 2, "ok": 1, "dropped": 0, "retry": 0} {
		if n := testkit.Metric(t, reg, "sluice_timer_firings_total", "timer", "tallies", "result", res); n != want {
			t.Errorf("firings %s = %v, want %v", res, n, want)
		}
	}
}

// A timer set again on a key whose firing is waiting for its retry is a new
// timer: its firing starts at attempt 1, not where the retried one was.
func TestTimerSetAgainStartsAtAttemptOne(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 1)
	store := newKeyTallies(t, changelog, nil)
	count := tallyStage(store)
	stage := func(ctx context.Context, m msg) ([]msg, error) { // sets the key's timer at every record
		outs, err := count(ctx, m)
		if err != nil {
			return nil, err
		}
		st, _ := store.Of(ctx)
		return outs, st.SetTimer(m.Key, time.Now())
	}
	timer, attempts := scriptedTimer(func(call int) error {
		if call == 1 {
			// Retried in an hour: the timer the second record sets
			// replaces it long before.
			return stages.RetryAfter(time.Hour, errors.New("not yet"))
		}
		return nil
	})
	calls := func() int { return len(attempts()) }
	cl := k.Client(t)
	produce(t, cl, cfg.Topics[0], 1, 1, nil)
	_, stop := start(t, k, cfg, stage, memsink.New[msg](), run.WithStores(store), run.WithTimers(0, timer))
	testkit.WaitFor(t, 30*time.Second, "the first firing", func() bool { return calls() == 1 })
	produce(t, cl, cfg.Topics[0], 1, 1, nil) // the same key
	testkit.WaitFor(t, 30*time.Second, "the firing of the timer set again", func() bool { return calls() == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := attempts(); fmt.Sprint(got) != "[1 1]" {
		t.Errorf("timer calls with attempts %v, want [1 1]: the timer set again is a new firing", got)
	}
}

// scriptedTimer returns a timer function whose n-th call (from 1) returns
// the error fail(n), or when it is nil the output firedPrefix+key, and a
// function returning the Attempt of every call so far.
func scriptedTimer(fail func(call int) error) (run.TimerFunc[msg], func() []int) {
	var mu sync.Mutex
	var attempts []int
	timer := func(ctx context.Context, f run.Firing) ([]msg, error) {
		mu.Lock()
		attempts = append(attempts, f.Attempt)
		n := len(attempts)
		mu.Unlock()
		if err := fail(n); err != nil {
			return nil, err
		}
		return []msg{{Key: firedPrefix + f.Key}}, nil
	}
	return timer, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(attempts)
	}
}
