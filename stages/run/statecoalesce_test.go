package run_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// changelogRecords returns the value of every record of key on topic, in
// log order.
func changelogRecords(t *testing.T, k *testkit.Kafka, topic, key string) []string {
	t.Helper()
	var out []string
	for _, r := range k.ReadTopic(t, topic) {
		if string(r.Key) == key {
			out = append(out, string(r.Value))
		}
	}
	return out
}

// silentTally is tallyStage without outputs (so that batches have nothing
// for the sink), counting the records it applied in applied; it fails
// fatally, before applying it, on the record at offset failAt (-1: never).
func silentTally(store *run.Store[keyTally], applied *atomic.Int64, failAt int64) stages.Func[string, msg] {
	tally := tallyStage(store)
	return func(ctx context.Context, m msg) ([]msg, error) {
		if m.Source.Offset == failAt {
			return nil, stages.Fatal(errors.New("crash before applying the record"))
		}
		if _, err := tally(ctx, m); err != nil {
			return nil, err
		}
		applied.Add(1)
		return nil, nil
	}
}

// With WithStateFlushEvery, the writes of one key over many batches are one
// changelog record, produced (with the batches' offsets marked only then)
// at the flush — here the clean stop. A runner that dies before its next
// flush leaves the last flushed value and offsets: the next owner restores
// that value and processes the rest once.
func TestStateFlushEveryCoalescesWrites(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 1)
	cfg.BatchMaxRecords = 10
	cl, adm := k.Client(t), k.Admin(t)
	committed := func() int64 { return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) }
	first := produce(t, cl, cfg.Topics[0], 100, 1, nil)
	key := string(first[0].Key)

	var applied atomic.Int64
	store := newKeyTallies(t, changelog, nil)
	_, stop := start(t, k, cfg, silentTally(store, &applied, -1), memsink.New[msg](), run.WithStores(store), run.WithStateFlushEvery(time.Hour))
	testkit.WaitFor(t, 30*time.Second, "the first records applied", func() bool { return applied.Load() == int64(len(first)) })
	time.Sleep(3 * cfg.CommitInterval) // commits would have happened by now
	if c := committed(); c != 0 {
		t.Errorf("%d offsets committed before the state was flushed, want 0", c)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := changelogRecords(t, k, changelog, key); len(got) != 1 || tallyN(t, got[0]) != len(first) {
		t.Errorf("changelog records of %s after %d writes in %d batches: %q, want one with n 100", key, len(first), len(first)/cfg.BatchMaxRecords, got)
	}
	if c := committed(); c != int64(len(first)) {
		t.Errorf("committed %d after the clean stop, want %d", c, len(first))
	}

	// A crash (a fatal error, no flush) after 30 of 50 more records.
	second := produce(t, cl, cfg.Topics[0], 50, 1, nil)
	var applied2 atomic.Int64
	store2 := newKeyTallies(t, changelog, nil)
	r2, err := run.New(cfg, decodeString, silentTally(store2, &applied2, second[30].Offset), stages.Sink[msg](memsink.New[msg]()),
		run.WithKafkaOpts(k.Opts(t)...), run.WithStores(store2), run.WithStateFlushEvery(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Run(testkit.Context(t)); err == nil || !strings.Contains(err.Error(), "crash before applying") {
		t.Fatalf("the crashing runner returned %v, want its fatal error", err)
	}
	if n := applied2.Load(); n != 30 {
		t.Fatalf("the crashing runner applied %d records, want 30", n)
	}
	if got := changelogRecords(t, k, changelog, key); len(got) != 1 {
		t.Errorf("changelog records of %s after the crash: %q, want still the one flushed", key, got)
	}
	if c := committed(); c != int64(len(first)) {
		t.Errorf("committed %d after the crash, want the last flushed %d", c, len(first))
	}

	// The next owner restores n 100 and applies the 50 records once.
	var applied3 atomic.Int64
	store3 := newKeyTallies(t, changelog, nil)
	_, stop3 := start(t, k, cfg, silentTally(store3, &applied3, -1), memsink.New[msg](), run.WithStores(store3))
	testkit.WaitFor(t, 30*time.Second, "every record committed", func() bool { return committed() == int64(len(first)+len(second)) })
	if err := stop3(); err != nil {
		t.Fatal(err)
	}
	if n := applied3.Load(); n != int64(len(second)) {
		t.Errorf("the next owner applied %d records, want the %d after the last flush", n, len(second))
	}
	checkTallies(t, k, newKeyTallies(t, changelog, nil), map[string]int{key: len(first) + len(second)}, -1)
}

// tallyN decodes a keyTally changelog value's count.
func tallyN(t *testing.T, v string) int {
	t.Helper()
	c, err := decodeJSON[keyTally]([]byte(v))
	if err != nil {
		t.Fatal(err)
	}
	return c.N
}

// A partition that goes quiet flushes what waited once every has passed:
// its offsets commit without another record or a stop, and its key's
// writes of the batches before are fewer changelog records than batches;
// with StoreConfig.EncodeAtFlush, a value is encoded once per record.
func TestStateFlushEveryFlushesWhenDue(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 1)
	cfg.BatchMaxRecords = 10
	cl, adm := k.Client(t), k.Admin(t)
	recs := produce(t, cl, cfg.Topics[0], 100, 1, nil)
	var applied, encoded atomic.Int64
	store, err := run.NewStore(run.StoreConfig[keyTally]{Name: "tallies", Topic: changelog, Decode: decodeJSON[keyTally], EncodeAtFlush: true,
		Encode: func(v keyTally) ([]byte, error) { encoded.Add(1); return encodeJSON(v) }})
	if err != nil {
		t.Fatal(err)
	}
	_, stop := start(t, k, cfg, silentTally(store, &applied, -1), memsink.New[msg](), run.WithStores(store), run.WithStateFlushEvery(time.Second))
	testkit.WaitFor(t, 30*time.Second, "every record committed while the runner runs", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == int64(len(recs))
	})
	got := changelogRecords(t, k, changelog, string(recs[0].Key))
	if len(got) == 0 || len(got) >= len(recs)/cfg.BatchMaxRecords || tallyN(t, got[len(got)-1]) != len(recs) {
		t.Errorf("changelog records of the key: %q, want fewer than one per batch (%d), the last with n %d", got, len(recs)/cfg.BatchMaxRecords, len(recs))
	}
	if n := encoded.Load(); n != int64(len(got)) {
		t.Errorf("Encode called %d times for %d changelog records of %d Puts, want once per record", n, len(got), len(recs))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// Timer firings without outputs defer their state writes too: a periodic
// timer that counts its firings in one key writes the key once, at the
// clean stop, however often it fired.
func TestStateFlushEveryDefersQuietFirings(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 1)
	store := newKeyTallies(t, changelog, nil)
	var fired atomic.Int64
	tick := func(ctx context.Context, _ run.Firing) ([]msg, error) {
		part, err := store.Of(ctx)
		if err != nil {
			return nil, err
		}
		c, _ := part.Get("ticks")
		c.Fired++
		fired.Add(1)
		return nil, part.Put("ticks", c)
	}
	_, stop := start(t, k, cfg, passthrough, memsink.New[msg](), run.WithStores(store), run.WithTimers(20*time.Millisecond, tick),
		run.WithStateFlushEvery(time.Hour))
	testkit.WaitFor(t, 30*time.Second, "ten firings", func() bool { return fired.Load() >= 10 })
	if got := changelogRecords(t, k, changelog, "ticks"); len(got) != 0 {
		t.Errorf("changelog records of the firings' key before the stop: %q, want none", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := changelogRecords(t, k, changelog, "ticks")
	if len(got) != 1 {
		t.Fatalf("changelog records of the firings' key after the stop: %q, want one", got)
	}
	if c, err := decodeJSON[keyTally]([]byte(got[0])); err != nil || int64(c.Fired) != fired.Load() {
		t.Errorf("flushed %q (%v), want the %d firings", got[0], err, fired.Load())
	}
}

// Partition.Flush makes the keys written so far durable before the batch's
// outputs: the sink, called after the stage flushed, finds both keys'
// records on the changelog already.
func TestPartitionFlushBeforeTheOutputs(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 1)
	store := newKeyTallies(t, changelog, nil)
	produce(t, k.Client(t), cfg.Topics[0], 1, 1, nil)
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		part, err := store.Of(ctx)
		if err != nil {
			return nil, err
		}
		for _, key := range []string{"a", "b"} {
			if err := part.Put(key, keyTally{N: 1}); err != nil {
				return nil, err
			}
		}
		return []msg{m}, part.Flush()
	}
	var atSink atomic.Int64
	sink := stages.SinkFunc[msg](func(_ context.Context, _ []msg) error {
		atSink.Store(int64(len(changelogRecords(t, k, changelog, "a")) + len(changelogRecords(t, k, changelog, "b"))))
		return nil
	})
	_, stop := start(t, k, cfg, stage, sink, run.WithStores(store), run.WithStateFlushEvery(time.Hour))
	testkit.WaitFor(t, 30*time.Second, "the record committed", func() bool {
		return sum(testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])) == 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := atSink.Load(); n != 2 {
		t.Errorf("the sink found %d changelog records of the two keys, want 2 (flushed before it)", n)
	}
	if got := changelogRecords(t, k, changelog, "a"); len(got) != 1 {
		t.Errorf("changelog records of a: %q, want one (nothing left to write after the flush)", got)
	}
}

// Coalesced state writes and key concurrency do not go together: New
// refuses them.
func TestStateFlushEveryRefusesKeyConcurrency(t *testing.T) {
	t.Parallel()
	cfg := run.Config{Name: "p", Topics: []string{"in"}, DLQTopic: "in.dlq", KeyConcurrency: 4}
	if _, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](memsink.New[msg]()), run.WithStateFlushEvery(time.Second)); err == nil || !strings.Contains(err.Error(), "KeyConcurrency") {
		t.Errorf("New = %v, want a refusal", err)
	}
	cfg.KeyConcurrency = 0
	if _, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](memsink.New[msg]()), run.WithStateFlushEvery(time.Second)); err != nil {
		t.Errorf("without key concurrency: New = %v", err)
	}
}
