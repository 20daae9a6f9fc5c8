package run_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// tally is the output of the window tests: per key, how many records it
// stands for and the value of the newest one.
type tally struct {
	Key   string
	Count int
	Last  string
}

func toTally(_ context.Context, m msg) ([]tally, error) {
	return []tally{{Key: m.Key, Count: 1, Last: m.Value}}, nil
}

// tallySink records every Write and implements run.Merger. reject, when
// set, refuses the merged output of that key; fails makes the first Writes
// fail transiently.
type tallySink struct {
	mu     sync.Mutex
	writes [][]tally
	state  map[string]tally
	reject string
	fails  int
}

func (s *tallySink) MergeKey(t tally) string { return t.Key }

func (s *tallySink) Merge(old, next tally) tally {
	return tally{Key: next.Key, Count: old.Count + next.Count, Last: next.Last}
}

func (s *tallySink) Write(_ context.Context, batch []tally) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fails > 0 {
		s.fails--
		return errors.New("database restarting")
	}
	s.writes = append(s.writes, append([]tally(nil), batch...))
	var rej stages.Rejections
	for i, t := range batch {
		if t.Key == s.reject {
			rej.Items = append(rej.Items, stages.Rejection{Index: i, Rule: "test.refused", Err: errors.New("value out of range")})
			continue
		}
		old, ok := s.state[t.Key]
		if ok {
			t = s.Merge(old, t)
		}
		s.state[t.Key] = t
	}
	if len(rej.Items) > 0 {
		return &rej
	}
	return nil
}

func (s *tallySink) snapshot() (map[string]tally, [][]tally) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := make(map[string]tally, len(s.state))
	for k, v := range s.state {
		st[k] = v
	}
	return st, append([][]tally(nil), s.writes...)
}

func (s *tallySink) total() int {
	st, _ := s.snapshot()
	n := 0
	for _, t := range st {
		n += t.Count
	}
	return n
}

// A window folds many batches into few writes, one output per key per
// write, and the result equals writing every record in partition order.
func TestWindowCoalescesAcrossBatches(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 2)
	cfg.Window = run.WindowConfig{MaxKeys: 1000, MaxAge: time.Minute}
	cl := k.Client(t)
	const n, keys = 3000, 40
	recs := produce(t, cl, cfg.Topics[0], n, keys, nil)
	sink := &tallySink{state: map[string]tally{}}
	_, stop := start(t, k, cfg, toTally, stages.Sink[tally](sink))
	testkit.WaitFor(t, 60*time.Second, "every record written", func() bool { return sink.total() == n })
	stopWhenCommitted(t, k, cfg, n, 30*time.Second, stop)
	state, writes := sink.snapshot()
	want := map[string]tally{}
	for _, r := range recs {
		w := want[string(r.Key)]
		want[string(r.Key)] = tally{Key: string(r.Key), Count: w.Count + 1, Last: string(r.Value)}
	}
	for key, w := range want {
		if state[key] != w {
			t.Errorf("key %s: got %+v, want %+v", key, state[key], w)
		}
	}
	// Without windows: at least n/BatchMaxRecords = 60 writes.
	if len(writes) > 10 {
		t.Errorf("%d writes for %d records in batches of %d: the window did not coalesce", len(writes), n, cfg.BatchMaxRecords)
	}
	for i, w := range writes {
		seen := map[string]bool{}
		for _, t2 := range w {
			if seen[t2.Key] {
				t.Fatalf("write %d holds key %s twice", i, t2.Key)
			}
			seen[t2.Key] = true
		}
	}
	t.Logf("%d records in %d writes", n, len(writes))
}

// MaxKeys closes a window once it holds that many keys, so a window's write
// is bounded by MaxKeys plus the keys of one batch.
func TestWindowMaxKeysBoundsWrites(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.Window = run.WindowConfig{MaxKeys: 30, MaxAge: time.Minute}
	cl := k.Client(t)
	const n, keys = 2000, 500
	produce(t, cl, cfg.Topics[0], n, keys, nil)
	sink := &tallySink{state: map[string]tally{}}
	_, stop := start(t, k, cfg, toTally, stages.Sink[tally](sink))
	testkit.WaitFor(t, 60*time.Second, "every record written", func() bool { return sink.total() == n })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	_, writes := sink.snapshot()
	for i, w := range writes {
		if len(w) >= cfg.Window.MaxKeys+cfg.BatchMaxRecords {
			t.Errorf("write %d has %d outputs, want < MaxKeys + BatchMaxRecords = %d", i, len(w), cfg.Window.MaxKeys+cfg.BatchMaxRecords)
		}
	}
	if len(writes) < n/(cfg.Window.MaxKeys+cfg.BatchMaxRecords) {
		t.Errorf("only %d writes", len(writes))
	}
}

// MaxTotalKeys bounds the keys held by the windows of all partitions
// together: a window closes once its batch brings the total to the bound,
// so no write exceeds MaxTotalKeys plus one batch, while the same stream
// without the bound is written in larger windows (one per partition). The
// held-keys gauge is back at zero once every window is written.
func TestWindowMaxTotalKeysBoundsAllPartitions(t *testing.T) {
	t.Parallel()
	const n, keys, total = 4000, 1000, 40
	run1 := func(maxTotal int) (largest int, reg *prometheus.Registry, cfg run.Config) {
		k := testkit.NewKafka(t, testkit.FakeOK())
		cfg = baseConfig(t, k, 4)
		cfg.Window = run.WindowConfig{MaxKeys: 100000, MaxAge: time.Minute, MaxTotalKeys: maxTotal}
		produce(t, k.Client(t), cfg.Topics[0], n, keys, nil)
		sink := &tallySink{state: map[string]tally{}}
		reg = prometheus.NewRegistry()
		_, stop := start(t, k, cfg, toTally, stages.Sink[tally](sink), run.WithRegisterer(reg))
		testkit.WaitFor(t, 60*time.Second, "every record written", func() bool { return sink.total() == n })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		state, writes := sink.snapshot()
		if len(state) != keys {
			t.Fatalf("%d keys written, want %d", len(state), keys)
		}
		for _, w := range writes {
			largest = max(largest, len(w))
		}
		return largest, reg, cfg
	}
	largest, reg, cfg := run1(total)
	if bound := total + cfg.BatchMaxRecords; largest >= bound {
		t.Errorf("largest write has %d outputs, want < MaxTotalKeys + BatchMaxRecords = %d", largest, bound)
	}
	if got := testkit.Metric(t, reg, "sluice_window_keys"); got != 0 {
		t.Errorf("sluice_window_keys = %v after every window was written, want 0", got)
	}
	unbounded, _, _ := run1(0)
	if unbounded < total+cfg.BatchMaxRecords {
		t.Errorf("without MaxTotalKeys the largest write has only %d outputs: the test does not exercise the bound", unbounded)
	}
	t.Logf("largest write: %d outputs with MaxTotalKeys=%d, %d without", largest, total, unbounded)
}

// A window dropped without its write (the worker stops while the sink
// keeps failing) no longer counts against MaxTotalKeys: its records are
// redelivered, and the held-keys gauge goes back to zero.
func TestWindowDroppedReleasesKeys(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 2)
	cfg.Window = run.WindowConfig{MaxKeys: 1000, MaxAge: time.Minute, MaxTotalKeys: 5000}
	cfg.RevokeTimeout = 500 * time.Millisecond
	produce(t, k.Client(t), cfg.Topics[0], 200, 20, nil)
	sink := &tallySink{state: map[string]tally{}, fails: 1 << 30}
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, toTally, stages.Sink[tally](sink), run.WithRegisterer(reg))
	testkit.WaitFor(t, 30*time.Second, "a failing window write", func() bool {
		return testkit.Metric(t, reg, "sluice_retries_total") > 0 && testkit.Metric(t, reg, "sluice_window_keys") > 0
	})
	_ = stop() // the worker gives up its window; Run may report that
	if got := testkit.Metric(t, reg, "sluice_window_keys"); got != 0 {
		t.Errorf("sluice_window_keys = %v after the window was dropped, want 0", got)
	}
	if n := sink.total(); n != 0 {
		t.Errorf("%d records written by a sink that always fails", n)
	}
}

// countingMerger counts the merges the runner's windows perform (Merge
// calls); the tallySink's own fold of its state does not go through it.
type countingMerger struct {
	*tallySink
	merges atomic.Int64
}

func (c *countingMerger) Merge(old, next tally) tally {
	c.merges.Add(1)
	return c.tallySink.Merge(old, next)
}

// sluice_window_merged_total counts the merges of windows that were
// written (writes saved), not those of a window dropped unwritten: a
// worker stopped while its window's write keeps failing drops the window,
// and its merges, redone by the member that gets the records again, count
// there once that member writes them.
func TestWindowMergedCountsWrittenWindowsOnly(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.Window = run.WindowConfig{MaxKeys: 1000, MaxAge: time.Minute}
	cfg.RevokeTimeout = 500 * time.Millisecond
	cl, adm := k.Client(t), k.Admin(t)
	const n, keys = 200, 20
	produce(t, cl, cfg.Topics[0], n, keys, nil)

	failing := &countingMerger{tallySink: &tallySink{state: map[string]tally{}, fails: 1 << 30}}
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, toTally, stages.Sink[tally](failing), run.WithRegisterer(reg))
	testkit.WaitFor(t, 30*time.Second, "a window with merges whose write fails", func() bool {
		return failing.merges.Load() > 0 && testkit.Metric(t, reg, "sluice_retries_total", "kind", "sink") > 0
	})
	_ = stop() // the worker drops its window; Run may report that
	if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); len(c) != 0 {
		t.Fatalf("committed %v although no window was written", c)
	}
	if got := testkit.Metric(t, reg, "sluice_window_merged_total"); got != 0 {
		t.Errorf("sluice_window_merged_total = %v after %d merges in windows that were dropped unwritten, want 0", got, failing.merges.Load())
	}

	sink := &countingMerger{tallySink: &tallySink{state: map[string]tally{}}}
	reg2 := prometheus.NewRegistry()
	_, stop2 := start(t, k, cfg, toTally, stages.Sink[tally](sink), run.WithRegisterer(reg2))
	waitCommittedAtEnd(t, adm, cfg.Group, cfg.Topics[0], 30*time.Second)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	_, writes := sink.snapshot()
	written := 0
	for _, w := range writes {
		written += len(w)
	}
	if got := sink.total(); got != n {
		t.Fatalf("sink holds %d records, want %d", got, n)
	}
	got := testkit.Metric(t, reg2, "sluice_window_merged_total")
	if int(got) != n-written || int64(got) != sink.merges.Load() {
		t.Errorf("sluice_window_merged_total = %v, want %d (%d outputs in %d written) = the %d merges performed", got, n-written, n, written, sink.merges.Load())
	}
}

// A transient sink failure retries the whole window and holds its commit;
// nothing is lost or dead-lettered.
func TestWindowTransientFailureHoldsCommit(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.Window = run.WindowConfig{MaxKeys: 10000, MaxAge: time.Minute}
	cfg.SinkRetry = run.RetryPolicy{Initial: 300 * time.Millisecond, Max: 300 * time.Millisecond}
	cl, adm := k.Client(t), k.Admin(t)
	const n = 500
	produce(t, cl, cfg.Topics[0], n, 50, nil)
	sink := &tallySink{state: map[string]tally{}, fails: 3}
	_, stop := start(t, k, cfg, toTally, stages.Sink[tally](sink))
	testkit.WaitFor(t, 30*time.Second, "a failed write", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return sink.fails < 3
	})
	if c := sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])); c != 0 && sink.total() < n {
		t.Fatalf("committed %d records before the window was written", c)
	}
	testkit.WaitFor(t, 60*time.Second, "every record written", func() bool { return sink.total() == n })
	stopWhenCommitted(t, k, cfg, n, 30*time.Second, stop)
	if dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted()); len(dlq) != 0 {
		t.Fatalf("%d records dead-lettered for a transient failure", len(dlq))
	}
}

// When the sink rejects a merged output, every record behind it is read back
// and dead-lettered with its original key, value, headers and coordinates;
// the other keys land and everything is committed.
func TestWindowRejectionDeadLettersEveryRecordOfTheKey(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 2)
	cfg.Window = run.WindowConfig{MaxKeys: 1000, MaxAge: time.Minute}
	cl := k.Client(t)
	const n, keys = 1000, 10
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: cfg.Topics[0], Key: []byte(fmt.Sprintf("k-%d", i%keys)), Value: []byte(fmt.Sprintf("v-%d", i)),
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte(strconv.Itoa(i))}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	sink := &tallySink{state: map[string]tally{}, reject: "k-3"}
	_, stop := start(t, k, cfg, toTally, stages.Sink[tally](sink))
	stopWhenCommitted(t, k, cfg, n, 60*time.Second, stop)
	if got, want := sink.total(), n-n/keys; got != want {
		t.Errorf("sink holds %d records, want %d", got, want)
	}
	dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
	if len(dlq) != n/keys {
		t.Fatalf("DLQ has %d records, want the %d records of key k-3", len(dlq), n/keys)
	}
	byValue := map[string]*kgo.Record{}
	for _, r := range recs {
		byValue[string(r.Value)] = r
	}
	seen := map[string]bool{}
	for _, d := range dlq {
		orig := byValue[string(d.Value)]
		if orig == nil || string(d.Key) != "k-3" || seen[string(d.Value)] {
			t.Fatalf("unexpected DLQ record %q/%q", d.Key, d.Value)
		}
		seen[string(d.Value)] = true
		want := map[string]string{
			"trace":                      string(orig.Headers[0].Value),
			stages.HeaderReason:          "sink_rejected",
			stages.HeaderRule:            "test.refused",
			stages.HeaderStage:           "test/sink",
			stages.HeaderSourceTopic:     cfg.Topics[0],
			stages.HeaderSourcePartition: strconv.Itoa(int(orig.Partition)),
			stages.HeaderSourceOffset:    strconv.FormatInt(orig.Offset, 10),
		}
		for h, v := range want {
			if got, ok := testkit.Header(d, h); !ok || got != v {
				t.Errorf("header %s = %q (present %t), want %q", h, got, ok, v)
			}
		}
		if e, _ := testkit.Header(d, stages.HeaderError); !strings.Contains(e, "value out of range") {
			t.Errorf("dlq.error = %q", e)
		}
	}
}

// A window needs a sink that can merge.
func TestWindowNeedsMerger(t *testing.T) {
	t.Parallel()
	cfg := run.Config{Name: "w", Topics: []string{"in"}, DLQTopic: "dlq", Window: run.WindowConfig{MaxKeys: 10}}
	_, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](memsink.New[msg]()))
	if err == nil || !strings.Contains(err.Error(), "run.Merger") {
		t.Fatalf("New = %v, want an error naming run.Merger", err)
	}
	cfg.Window.MaxKeys = -1
	if err := cfg.Validate(); err == nil {
		t.Fatal("negative MaxKeys accepted")
	}
}

// A rebalance closes the revoked partitions' windows before they move: the
// new owner continues from the committed offset, so every record is written
// (at least once) and each key's newest value wins.
func TestWindowRebalanceLosesNothing(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 4)
	cfg.Window = run.WindowConfig{MaxKeys: 100000, MaxAge: 300 * time.Millisecond}
	cl, adm := k.Client(t), k.Admin(t)
	const n, keys = 4000, 40
	recs := produce(t, cl, cfg.Topics[0], n, keys, nil)
	sink := &tallySink{state: map[string]tally{}}
	// 1 ms per record: each partition takes about a second.
	slow := func(ctx context.Context, m msg) ([]tally, error) {
		time.Sleep(time.Millisecond)
		return toTally(ctx, m)
	}
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	_, stopA := start(t, k, cfg, slow, stages.Sink[tally](sink), run.WithRegisterer(regA))
	testkit.WaitFor(t, 30*time.Second, "first writes", func() bool { return sink.total() > 0 })
	_, stopB := start(t, k, cfg, slow, stages.Sink[tally](sink), run.WithRegisterer(regB))
	testkit.WaitFor(t, 60*time.Second, "commit of every record", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n
	})
	if err := errors.Join(stopA(), stopB()); err != nil {
		t.Fatal(err)
	}
	// Windows written, revoked or dropped with their partition: none holds
	// keys any more.
	for name, reg := range map[string]*prometheus.Registry{"A": regA, "B": regB} {
		if got := testkit.Metric(t, reg, "sluice_window_keys"); got != 0 {
			t.Errorf("member %s: sluice_window_keys = %v after stopping, want 0", name, got)
		}
	}
	state, _ := sink.snapshot()
	want := map[string]tally{}
	for _, r := range recs {
		w := want[string(r.Key)]
		want[string(r.Key)] = tally{Key: string(r.Key), Count: w.Count + 1, Last: string(r.Value)}
	}
	dups := 0
	for key, w := range want {
		got := state[key]
		if got.Count < w.Count || got.Last != w.Last {
			t.Errorf("key %s: got %+v, want count ≥ %d and last %q", key, got, w.Count, w.Last)
		}
		dups += got.Count - w.Count
	}
	t.Logf("%d duplicate writes after the rebalance", dups)
}

// gateSink blocks its first Write until release is closed.
type gateSink struct {
	*tallySink
	once             sync.Once
	entered, release chan struct{}
}

func (s *gateSink) Write(ctx context.Context, batch []tally) error {
	s.once.Do(func() { close(s.entered); <-s.release })
	return s.tallySink.Write(ctx, batch)
}

// When the records behind a rejected merged output were deleted while the
// window was open (retention, DeleteRecords), they are dead-lettered as
// stubs with their coordinates instead of the read-back failing for ever.
func TestWindowRejectionOfDeletedRecordsDeadLettersStubs(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.Window = run.WindowConfig{MaxKeys: 1000, MaxAge: time.Minute}
	cl, adm := k.Client(t), k.Admin(t)
	const n, keys = 20, 4
	produce(t, cl, cfg.Topics[0], n, keys, nil) // key k-(i%4): k-1 at offsets 1, 5, 9, 13, 17
	sink := &gateSink{tallySink: &tallySink{state: map[string]tally{}, reject: "k-1"},
		entered: make(chan struct{}), release: make(chan struct{})}
	_, stop := start(t, k, cfg, toTally, stages.Sink[tally](sink))
	select {
	case <-sink.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the window was never written")
	}
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: cfg.Topics[0], Partition: 0, At: n})
	resp, err := adm.DeleteRecords(context.Background(), del)
	if err == nil {
		err = resp.Error()
	}
	close(sink.release)
	if err != nil {
		t.Fatalf("delete records: %v", err)
	}
	stopWhenCommitted(t, k, cfg, n, 60*time.Second, stop)
	if got := sink.total(); got != n-n/keys {
		t.Errorf("sink holds %d records, want %d", got, n-n/keys)
	}
	dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
	var offsets []string
	for _, d := range dlq {
		off, _ := testkit.Header(d, stages.HeaderSourceOffset)
		offsets = append(offsets, off)
		omitted, ok := testkit.Header(d, stages.HeaderValueOmitted)
		reason, _ := testkit.Header(d, stages.HeaderReason)
		if !ok || !strings.Contains(omitted, "no longer in its partition") || len(d.Value) != 0 || reason != "sink_rejected" {
			t.Errorf("dead letter of offset %s: reason %q, value %q, %s = %q", off, reason, d.Value, stages.HeaderValueOmitted, omitted)
		}
	}
	if fmt.Sprint(offsets) != "[1 5 9 13 17]" {
		t.Errorf("dead letters for offsets %v, want the 5 records of k-1", offsets)
	}
}

// A stub dead letter produced in the same DLQ batch as a dead letter too
// large for the DLQ topic is refused with it (the broker refuses the whole
// batch): that says nothing about the stub alone, so it is produced alone
// like the others instead of being taken for a stub that fits nowhere.
// Here the sink rejects key k-1, whose first records were deleted while the
// window was open (stubs) and whose last ones are too large for the DLQ
// topic: every record of k-1 is dead-lettered as a stub and everything is
// committed; the runner does not stop.
func TestWindowStubInRefusedDLQBatchIsProducedAlone(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.Window = run.WindowConfig{MaxKeys: 1000, MaxAge: time.Minute}
	limit := "2048" // a stub fits; a dead letter with a 4 KiB value does not
	cfg.DLQTopic = k.Topic(t, "dlq.small", 1, map[string]*string{"max.message.bytes": &limit})
	cl, adm := k.Client(t), k.Admin(t)
	const n, keys = 20, 4
	// k-1 at offsets 1, 5, 9 (deleted below) and 13, 17 (too large).
	rnd := rand.New(rand.NewPCG(1, 2))
	produce(t, cl, cfg.Topics[0], n, keys, func(i int) string {
		if i == 13 || i == 17 { // incompressible: the producer compresses batches
			b := make([]byte, 4<<10)
			for j := range b {
				b[j] = byte('a' + rnd.IntN(26))
			}
			return "big-" + string(b)
		}
		return "v-" + strconv.Itoa(i)
	})
	sink := &gateSink{tallySink: &tallySink{state: map[string]tally{}, reject: "k-1"},
		entered: make(chan struct{}), release: make(chan struct{})}
	_, stop := start(t, k, cfg, toTally, stages.Sink[tally](sink))
	select {
	case <-sink.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the window was never written")
	}
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: cfg.Topics[0], Partition: 0, At: 10})
	resp, err := adm.DeleteRecords(context.Background(), del)
	if err == nil {
		err = resp.Error()
	}
	close(sink.release)
	if err != nil {
		t.Fatalf("delete records: %v", err)
	}
	testkit.WaitFor(t, 60*time.Second, "commit of every record", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n
	})
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil: every dead letter fits the DLQ topic as a stub", err)
	}
	var offsets []int
	for _, d := range k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted()) {
		off, _ := testkit.Header(d, stages.HeaderSourceOffset)
		o, _ := strconv.Atoi(off)
		offsets = append(offsets, o)
		if _, ok := testkit.Header(d, stages.HeaderValueOmitted); !ok || len(d.Value) != 0 {
			t.Errorf("dead letter of offset %s is not a stub: value %d bytes", off, len(d.Value))
		}
	}
	slices.Sort(offsets)
	if fmt.Sprint(offsets) != "[1 5 9 13 17]" {
		t.Errorf("dead letters for offsets %v, want the 5 records of k-1", offsets)
	}
}

// A rejected merged output whose records cannot be dead-lettered even as
// stubs (the DLQ topic's max.message.bytes is below the dlq.* headers
// alone) stops the runner with a fatal error, as without a window, instead
// of retrying the window's write for ever; nothing of the window is
// committed.
func TestWindowDLQStubTooLargeIsFatal(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.Window = run.WindowConfig{MaxKeys: 1000, MaxAge: time.Minute}
	limit := "256"
	cfg.DLQTopic = k.Topic(t, "dlq.tiny", 1, map[string]*string{"max.message.bytes": &limit})
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, cfg.Topics[0], 20, 4, nil)
	sink := &tallySink{state: map[string]tally{}, reject: "k-1"}
	reg := prometheus.NewRegistry()
	r, err := run.New(cfg, decodeString, toTally, stages.Sink[tally](sink),
		run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)), run.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run = %v only after the deadline: the window's write was retried instead of failing", err)
	}
	if err == nil || !strings.Contains(err.Error(), cfg.DLQTopic) || stages.Classify(err).Kind != stages.KindFatal {
		t.Fatalf("Run = %v, want a fatal error naming the DLQ topic %s", err, cfg.DLQTopic)
	}
	if got := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0]; got != 0 {
		t.Errorf("committed %d, want 0 (the window holds every record)", got)
	}
	if got := testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "fatal"); got != 1 {
		t.Errorf("fatal errors = %v, want 1", got)
	}
}
