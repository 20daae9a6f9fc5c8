package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// keyTally is the state the state tests keep per key: how many records of the
// key were applied, the offset after the last one (so that a redelivered
// record is applied once), and how many times the key's timer fired.
type keyTally struct {
	N     int   `json:"n"`
	Next  int64 `json:"next"`
	Fired int   `json:"fired"`
}

func encodeJSON[V any](v V) ([]byte, error) { return json.Marshal(v) }

func decodeJSON[V any](b []byte) (V, error) {
	var v V
	err := json.Unmarshal(b, &v)
	return v, err
}

// newKeyTallies declares a keyTally store on changelog topic.
func newKeyTallies(t *testing.T, topic string, fold func(cur, next run.Entry[keyTally]) bool) *run.Store[keyTally] {
	t.Helper()
	s, err := run.NewStore(run.StoreConfig[keyTally]{Name: "tallies", Topic: topic, Encode: encodeJSON[keyTally], Decode: decodeJSON[keyTally], Fold: fold})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// compacted is the config of a changelog topic.
var compacted = map[string]*string{"cleanup.policy": ptr("compact")}

func ptr[T any](v T) *T { return &v }

// tallyStage counts the records of each key in store, once per record
// (a redelivered record below the key's Next is not counted again), and
// passes the record on.
func tallyStage(store *run.Store[keyTally]) stages.Func[string, msg] {
	return func(ctx context.Context, m msg) ([]msg, error) {
		st, err := store.Of(ctx)
		if err != nil {
			return nil, err
		}
		c, _ := st.Get(m.Key)
		if m.Source.Offset < c.Next {
			return []msg{m}, nil // applied before a crash or a rebalance
		}
		c.N++
		c.Next = m.Source.Offset + 1
		if err := st.Put(m.Key, c); err != nil {
			return nil, err
		}
		return []msg{m}, nil
	}
}

// wantTallies returns the count per key of the records recs.
func wantTallies(recs []*kgo.Record) map[string]int {
	want := map[string]int{}
	for _, r := range recs {
		want[string(r.Key)]++
	}
	return want
}

// checkTallies reads the store's changelog and compares every key's count
// with want, and its Fired with fired (-1: not checked).
func checkTallies(t *testing.T, k *testkit.Kafka, store *run.Store[keyTally], want map[string]int, fired int) {
	t.Helper()
	got, err := store.Read(testkit.Context(t), k.Opts(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for p, byKey := range got {
		for key, c := range byKey {
			n++
			if c.N != want[key] {
				t.Errorf("partition %d key %s: count %d, want %d", p, key, c.N, want[key])
			}
			if fired >= 0 && c.Fired != fired {
				t.Errorf("partition %d key %s: fired %d times, want %d", p, key, c.Fired, fired)
			}
		}
	}
	if n != len(want) {
		t.Errorf("%d keys in the changelog, want %d", n, len(want))
	}
}

// stateConfig is baseConfig with a compacted changelog of the same
// partition count.
func stateConfig(t *testing.T, k *testkit.Kafka, partitions int32) (run.Config, string) {
	t.Helper()
	return baseConfig(t, k, partitions), k.Topic(t, "state", partitions, compacted)
}

// A runner restarted on the same group restores its store: the counts it
// continues from are exact, every key's count equals its records in the
// end, and the restore is counted.
func TestStoreRestoreAfterRestart(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 3)
	cl, adm := k.Client(t), k.Admin(t)
	first := produce(t, cl, cfg.Topics[0], 300, 17, nil)

	store := newKeyTallies(t, changelog, nil)
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, tallyStage(store), sink, run.WithStores(store))
	testkit.WaitFor(t, 30*time.Second, "the first records committed", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == int64(len(first))
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkTallies(t, k, store, wantTallies(first), 0)

	second := produce(t, cl, cfg.Topics[0], 200, 17, nil)
	again := newKeyTallies(t, changelog, nil)
	reg := prometheus.NewRegistry()
	sink2 := memsink.New[msg]()
	_, stop2 := start(t, k, cfg, tallyStage(again), sink2, run.WithStores(again), run.WithRegisterer(reg))
	testkit.WaitFor(t, 30*time.Second, "the second records committed", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == int64(len(first)+len(second))
	})
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	checkTallies(t, k, again, wantTallies(append(first, second...)), 0)
	if got := testkit.Metric(t, reg, "sluice_state_restore_records_total", "store", "tallies"); got < 17 {
		t.Errorf("sluice_state_restore_records_total = %v, want at least one record per key (17)", got)
	}
	if got := testkit.Metric(t, reg, "sluice_state_restoring", "store", "tallies"); got != 0 {
		t.Errorf("sluice_state_restoring = %v after the restores, want 0", got)
	}
	if got := testkit.Metric(t, reg, "sluice_state_writes_total", "store", "tallies"); got < 17 {
		t.Errorf("sluice_state_writes_total = %v, want at least one per key", got)
	}
}

// The changelog must exist with the input's partition count: Run fails
// before joining the group, naming both topics and counts.
func TestStoreCoPartitionMismatch(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 3)
	for _, tc := range []struct {
		name, changelog string
		want            []string
	}{
		{"fewer partitions", k.Topic(t, "state2", 2, compacted), []string{"has 2 partitions", "has 3", cfg.Topics[0], "co-partitioned"}},
		{"missing", testkit.Name(t, "nostate"), []string{"does not exist", "3 partitions of " + cfg.Topics[0]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newKeyTallies(t, tc.changelog, nil)
			r, err := run.New(cfg, decodeString, tallyStage(store), memsink.New[msg](), run.WithStores(store),
				run.WithKafkaOpts(k.Opts(t)...))
			if err != nil {
				t.Fatal(err)
			}
			err = r.Run(testkit.Context(t))
			if err == nil {
				t.Fatal("Run succeeded with a changelog that is not co-partitioned")
			}
			for _, w := range append(tc.want, tc.changelog) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// A store declaration is checked, belongs to one runner, and state needs a
// single input topic; the transactional runner refuses stores.
func TestStoreDeclarationErrors(t *testing.T) {
	t.Parallel()
	brokers := run.WithKafkaOpts(kgo.SeedBrokers("127.0.0.1:1"))
	if _, err := run.NewStore(run.StoreConfig[keyTally]{Name: "x"}); err == nil || !strings.Contains(err.Error(), "changelog topic is required") {
		t.Errorf("NewStore without a topic: %v", err)
	}
	cfg := run.Config{Name: "p", Topics: []string{"in"}, DLQTopic: "dlq"}
	store := newKeyTallies(t, "changelog", nil)
	if _, err := run.New(cfg, decodeString, tallyStage(store), memsink.New[msg](), brokers, run.WithStores(store)); err != nil {
		t.Fatal(err)
	}
	if _, err := run.New(cfg, decodeString, tallyStage(store), memsink.New[msg](), brokers, run.WithStores(store)); err == nil || !strings.Contains(err.Error(), "already used") {
		t.Errorf("a store given to a second runner: %v", err)
	}
	two := cfg
	two.Topics = []string{"a", "b"}
	if _, err := run.New(two, decodeString, passthrough, memsink.New[msg](), brokers, run.WithStores(newKeyTallies(t, "c2", nil))); err == nil || !strings.Contains(err.Error(), "exactly one input topic") {
		t.Errorf("stores on two input topics: %v", err)
	}
	tx := func(context.Context, stages.Msg[string]) ([]*kgo.Record, error) { return nil, nil }
	if _, err := run.NewTransactional(cfg, "tx", decodeString, tx, brokers, run.WithStores(newKeyTallies(t, "c3", nil))); err == nil {
		t.Error("the transactional runner accepted a store")
	}
	wrongTimer := func(context.Context, run.Firing) ([]string, error) { return nil, nil }
	if _, err := run.New(cfg, decodeString, passthrough, memsink.New[msg](), brokers, run.WithTimers(time.Second, wrongTimer)); err == nil || !strings.Contains(err.Error(), "WithTimers") {
		t.Errorf("a timer function of another output type: %v", err)
	}
}

// Reads see the stage's own earlier writes of the same batch; a Delete
// produces a tombstone; Of fails (fatal) on a context without the store.
func TestStoreReadsOwnWritesAndDeletes(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 1)
	cfg.BatchMaxRecords = 100
	cl := k.Client(t)
	// One batch: a, a, a, then "del" deletes key a.
	recs := []*kgo.Record{}
	for _, v := range []string{"add", "add", "add", "del"} {
		recs = append(recs, &kgo.Record{Topic: cfg.Topics[0], Key: []byte("a"), Value: []byte(v)})
	}
	if err := cl.ProduceSync(testkit.Context(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := run.NewStore[keyTally](run.StoreConfig[keyTally]{}); err == nil {
		t.Fatal("NewStore accepted an empty config")
	}
	store := newKeyTallies(t, changelog, nil)
	var seen []int
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		st, err := store.Of(ctx)
		if err != nil {
			return nil, err
		}
		c, _ := st.Get(m.Key)
		seen = append(seen, c.N)
		if m.Value == "del" {
			return nil, st.Delete(m.Key)
		}
		c.N++
		return []msg{m}, st.Put(m.Key, c)
	}
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, sink, run.WithStores(store))
	testkit.WaitFor(t, 30*time.Second, "the tombstone", func() bool {
		rs := k.ReadTopic(t, changelog)
		return len(rs) > 0 && rs[len(rs)-1].Value == nil
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seen) != "[0 1 2 3]" {
		t.Errorf("the stage saw counts %v, want [0 1 2 3] (its own writes of the batch)", seen)
	}
	got, err := store.Read(testkit.Context(t), k.Opts(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0]) != 0 {
		t.Errorf("state after the delete: %v, want none", got)
	}
	for _, r := range k.ReadTopic(t, changelog) {
		if _, ok := testkit.Header(r, run.HeaderStateEpoch); !ok {
			t.Errorf("changelog record %s@%d has no token", r.Key, r.Offset)
		}
	}
	if _, err := store.Of(context.Background()); !errors.Is(err, run.ErrNoStore) || stages.Classify(err).Kind != stages.KindFatal {
		t.Errorf("Of on a context without the store: %v, want a fatal ErrNoStore", err)
	}
}

// tokenRecord is a changelog record of key with value (nil: a tombstone)
// and the given token.
func tokenRecord(topic string, p int32, key string, value []byte, epoch int32, version int64) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: p, Key: []byte(key), Value: value, Headers: []kgo.RecordHeader{
		{Key: run.HeaderStateEpoch, Value: []byte(strconv.Itoa(int(epoch)))},
		{Key: run.HeaderStateVersion, Value: []byte(strconv.FormatInt(version, 10))},
	}}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

func tallyJSON(n int) []byte { b, _ := json.Marshal(keyTally{N: n}); return b }

// A zombie's late record (an epoch below one written before it in the
// partition) is refused by the restore; a record without a token (an
// operator's) is applied in log order; KeepGreatest keeps the greatest
// token of a key where the default keeps the last record.
func TestRestoreFence(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	changelog := k.Topic(t, "state", 1, compacted)
	recs := []*kgo.Record{
		tokenRecord(changelog, 0, "a", tallyJSON(1), 5, 1),
		tokenRecord(changelog, 0, "b", tallyJSON(2), 7, 2),  // the new owner's first write
		tokenRecord(changelog, 0, "a", tallyJSON(99), 5, 3), // the zombie's late write: refused
		tokenRecord(changelog, 0, "c", tallyJSON(3), 7, 9),
		tokenRecord(changelog, 0, "c", tallyJSON(4), 7, 8), // an earlier version after a later one
		{Topic: changelog, Key: []byte("d"), Value: tallyJSON(5)},
		{Topic: changelog, Key: []byte("b")}, // an operator's tombstone
	}
	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(testkit.Context(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		fold func(cur, next run.Entry[keyTally]) bool
		want string
	}{
		{nil, "map[a:1 c:4 d:5]"},
		{run.KeepGreatest[keyTally], "map[a:1 c:3 d:5]"},
	} {
		got, err := newKeyTallies(t, changelog, tc.fold).Read(testkit.Context(t), k.Opts(t), []int32{0})
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for key, c := range got[0] {
			n[key] = c.N
		}
		if fmt.Sprint(n) != tc.want {
			t.Errorf("fold %v: restored %v, want %s", tc.fold != nil, n, tc.want)
		}
	}

	// A runner restoring the same changelog counts the refusals and
	// continues with an epoch above the greatest one read (7), as its first
	// write shows.
	cfg := baseConfig(t, k, 1)
	store := newKeyTallies(t, changelog, run.KeepGreatest[keyTally])
	reg := prometheus.NewRegistry()
	var got atomic.Value
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		st, err := store.Of(ctx)
		if err != nil {
			return nil, err
		}
		c, _ := st.Get("a")
		got.Store(c.N)
		if o, ok := run.Owner(ctx); !ok || o.Epoch <= 7 || st.NextToken().Epoch != o.Epoch {
			return nil, stages.Fatal(fmt.Errorf("ownership %+v, next token %+v: want an epoch above 7", o, st.NextToken()))
		}
		return nil, st.Put("e", keyTally{N: 1})
	}
	produce(t, k.Client(t), cfg.Topics[0], 1, 1, nil)
	_, stop := start(t, k, cfg, stage, memsink.New[msg](), run.WithStores(store), run.WithRegisterer(reg))
	testkit.WaitFor(t, 30*time.Second, "the runner's write", func() bool { return len(k.ReadTopic(t, changelog)) == len(recs)+1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got.Load() != 1 {
		t.Errorf("the stage saw a = %v, want 1 (the zombie's 99 refused)", got.Load())
	}
	if n := testkit.Metric(t, reg, "sluice_state_fenced_total", "store", "tallies", "where", "restore"); n != 1 {
		t.Errorf("fenced at restore: %v, want 1", n)
	}
	if n := testkit.Metric(t, reg, "sluice_state_fenced_total", "store", "tallies", "where", "fold"); n != 1 {
		t.Errorf("refused by the fold: %v, want 1 (c's earlier version)", n)
	}
	all := k.ReadTopic(t, changelog)
	last := all[len(all)-1]
	if e, _ := testkit.Header(last, run.HeaderStateEpoch); atoi(t, e) <= 7 {
		t.Errorf("the runner wrote epoch %q, want above 7", e)
	}
	if v, _ := testkit.Header(last, run.HeaderStateVersion); v != "10" {
		t.Errorf("the runner wrote version %q, want 10 (after the greatest restored, 9)", v)
	}
}

// The runner is not ready while a partition's store is restoring.
func TestNotReadyWhileRestoring(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg, changelog := stateConfig(t, k, 1)
	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(testkit.Context(t), tokenRecord(changelog, 0, "a", tallyJSON(1), 1, 1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Hold the restore's ListOffsets of the changelog until released.
	release := make(chan struct{})
	var held atomic.Bool
	k.Fake().ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		for _, t := range req.(*kmsg.ListOffsetsRequest).Topics {
			if t.Topic == changelog && !held.Load() {
				held.Store(true)
				k.Fake().SleepControl(func() { <-release })
			}
		}
		return nil, nil, false
	})
	store := newKeyTallies(t, changelog, nil)
	reg := prometheus.NewRegistry()
	r, stop := start(t, k, cfg, tallyStage(store), memsink.New[msg](), run.WithStores(store), run.WithRegisterer(reg))
	testkit.WaitFor(t, 30*time.Second, "the restore to start", func() bool { return held.Load() })
	if r.Ready() {
		t.Error("ready while the store is restoring")
	}
	if n := testkit.Metric(t, reg, "sluice_state_restoring", "store", "tallies"); n != 1 {
		t.Errorf("sluice_state_restoring = %v, want 1", n)
	}
	close(release)
	testkit.WaitFor(t, 30*time.Second, "ready after the restore", r.Ready)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// PutNow makes a value durable at once, before the batch's outputs are
// written, while Put's value waits for them.
func TestPutNowBeforeTheBatch(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 1)
	store := newKeyTallies(t, changelog, nil)
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		st, err := store.Of(ctx)
		if err != nil {
			return nil, err
		}
		if err := st.PutNow("lease", keyTally{N: 1}); err != nil {
			return nil, err
		}
		if err := st.Put("lease", keyTally{N: 2}); err != nil {
			return nil, err
		}
		return []msg{m}, st.Put("done", keyTally{N: 1})
	}
	release := make(chan struct{})
	sink := memsink.New(memsink.WithFailure(func([]msg, int) error { <-release; return nil }))
	produce(t, k.Client(t), cfg.Topics[0], 1, 1, nil)
	_, stop := start(t, k, cfg, stage, sink, run.WithStores(store))
	keys := func() string {
		var ks []string
		for _, r := range k.ReadTopic(t, changelog) {
			ks = append(ks, fmt.Sprintf("%s=%s", r.Key, r.Value))
		}
		return strings.Join(ks, " ")
	}
	testkit.WaitFor(t, 30*time.Second, "the lease in the changelog", func() bool { return keys() != "" })
	if got := keys(); got != `lease={"n":1,"next":0,"fired":0}` {
		t.Errorf("changelog before the sink's write: %s, want the lease alone", got)
	}
	close(release)
	testkit.WaitFor(t, 30*time.Second, "the batch's state", func() bool { return strings.Count(keys(), "=") == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := keys(); got != `lease={"n":1,"next":0,"fired":0} done={"n":1,"next":0,"fired":0} lease={"n":2,"next":0,"fired":0}` {
		t.Errorf("changelog %s, want the lease, then the batch's done and lease", got)
	}
}

// A key written by Put then PutNow in one batch, and then changed only in
// its timer (SetTimer), is produced with the batch carrying PutNow's value:
// the timer-only change must not resurrect Put's earlier encoding.
func TestPutNowThenTimerChangeKeepsPutNowValue(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 1)
	store := newKeyTallies(t, changelog, nil)
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		st, err := store.Of(ctx)
		if err != nil {
			return nil, err
		}
		if err := st.Put("k", keyTally{N: 1}); err != nil {
			return nil, err
		}
		if err := st.PutNow("k", keyTally{N: 2}); err != nil {
			return nil, err
		}
		return []msg{m}, st.SetTimer("k", time.Now().Add(time.Hour))
	}
	noop := func(context.Context, run.Firing) ([]msg, error) { return nil, nil }
	produce(t, k.Client(t), cfg.Topics[0], 1, 1, nil)
	adm := k.Admin(t)
	_, stop := start(t, k, cfg, stage, memsink.New[msg](), run.WithStores(store), run.WithTimers(0, noop))
	testkit.WaitFor(t, 30*time.Second, "the record committed", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, r := range k.ReadTopic(t, changelog) {
		vals = append(vals, fmt.Sprintf("%s=%s", r.Key, r.Value))
	}
	if got := strings.Join(vals, " "); got != `k={"n":2,"next":0,"fired":0} k={"n":2,"next":0,"fired":0}` {
		t.Errorf("changelog %s, want PutNow's k=2 twice (its own record, then the batch's with the timer)", got)
	}
	got, err := store.Read(testkit.Context(t), k.Opts(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[0]["k"].N != 2 {
		t.Errorf("restored k = %+v, want N=2 (PutNow's value, the one the stage saw)", got[0]["k"])
	}
}

// A restore whose offset listing fails (a broker error) retries it after
// the backoff, counted as a restore error, and then restores: the runner
// keeps running and its stage sees the restored state.
func TestRestoreRetriesFailedRead(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg, changelog := stateConfig(t, k, 1)
	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(testkit.Context(t), tokenRecord(changelog, 0, "a", tallyJSON(5), 1, 1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	k.Fake().ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		rq := req.(*kmsg.ListOffsetsRequest)
		if len(rq.Topics) == 0 || rq.Topics[0].Topic != changelog || !refused.CompareAndSwap(0, 1) {
			return nil, nil, false
		}
		resp := rq.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range rq.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.ErrorCode = p.Partition, kerr.UnknownServerError.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	store := newKeyTallies(t, changelog, nil)
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		st, err := store.Of(ctx)
		if err != nil {
			return nil, err
		}
		a, _ := st.Get("a")
		m.Value = strconv.Itoa(a.N)
		return []msg{m}, nil
	}
	produce(t, cl, cfg.Topics[0], 1, 1, nil)
	reg := prometheus.NewRegistry()
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, sink, run.WithStores(store), run.WithRegisterer(reg))
	testkit.WaitFor(t, 30*time.Second, "the record processed", func() bool { return sink.Len() == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run after a failed restore read: %v", err)
	}
	if refused.Load() != 1 {
		t.Fatalf("the offset listing of the changelog was refused %d times, want 1", refused.Load())
	}
	if got := sink.Items()[0].Value; got != "5" {
		t.Errorf("the stage saw a=%s, want the restored 5", got)
	}
	if n := testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "restore"); n != 1 {
		t.Errorf("restore errors counted %v, want 1", n)
	}
	if n := testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "fatal"); n != 0 {
		t.Errorf("fatal errors counted %v, want 0", n)
	}
}
