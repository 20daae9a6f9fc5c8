package dlq_test

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages/dlq"
)

// stallFetches makes kfake hold every fetch after the first pass ones until
// release is called or the test ends: a broker that stops answering in the
// middle of a scan. held is closed when the first fetch is held.
func stallFetches(t *testing.T, c *kfake.Cluster, pass int32) (release func(), held <-chan struct{}) {
	t.Helper()
	ch, hch := make(chan struct{}), make(chan struct{})
	var once, holdOnce sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	var n atomic.Int32
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if n.Add(1) <= pass {
			return nil, nil, false
		}
		holdOnce.Do(func() { close(hch) })
		c.SleepControl(func() { <-ch })
		return nil, nil, false
	})
	return release, hch
}

// fakeEnv is newEnv on kfake, for tests that hold fetches.
func fakeEnv(t *testing.T) env {
	t.Helper()
	k := testkit.NewKafka(t, testkit.ForceFake())
	return env{
		k:        k,
		opts:     k.Opts(t),
		cl:       k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())),
		dlqTopic: k.Topic(t, "dlq", 2),
		src:      k.Topic(t, "src", 3),
	}
}

// When fetches stop answering before every partition reached its end,
// Inspect fails naming the partitions left short instead of returning a
// partial listing as if it were complete.
func TestInspectFailsWhenFetchesStall(t *testing.T) {
	t.Parallel()
	e := fakeEnv(t)
	e.write(t, e.dlqTopic, fixture(e.src)...)
	stallFetches(t, e.k.Fake(), 0)
	n := 0
	start := time.Now()
	err := dlq.Inspect(ctxT(t), e.opts, e.dlqTopic, dlq.Filter{}, 0, func(dlq.Record) error { n++; return nil })
	if err == nil {
		t.Fatalf("Inspect returned no error after reading %d of 5 records with fetches stalled", n)
	}
	t.Logf("error: %v", err)
	for _, want := range []string{"[0] at offset 0 of 2", "[1] at offset 0 of 3", "slow or unavailable broker", "retention"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if n != 0 || time.Since(start) > 30*time.Second {
		t.Fatalf("%d records after %v, want 0 after about 10s", n, time.Since(start))
	}
}

// Redrive whose scan stalls fails, and its result counts the records it
// read and sent before the stall. The first fetch is let through; a
// one-byte fetch limit makes it return the first record of one partition
// only.
func TestRedriveFailsWhenFetchesStall(t *testing.T) {
	t.Parallel()
	e := fakeEnv(t)
	e.write(t, e.dlqTopic,
		spec{key: "a", value: "1", partition: 0, reason: "exception", srcTopic: e.src, srcPartition: 0, failedAt: t0, redrives: -1},
		spec{key: "b", value: "2", partition: 1, reason: "exception", srcTopic: e.src, srcPartition: 1, failedAt: t0, redrives: -1})
	release, _ := stallFetches(t, e.k.Fake(), 1)
	opts := append(e.opts[:len(e.opts):len(e.opts)], kgo.FetchMaxBytes(1))
	res, err := dlq.Redrive(ctxT(t), opts, dlq.RedriveRequest{DLQTopic: e.dlqTopic})
	if err == nil {
		t.Fatalf("Redrive returned no error with fetches stalled: %+v", res)
	}
	if res.Scanned != 1 || res.Sent != 1 {
		t.Fatalf("result %+v (err %v), want the 1 record read before the stall scanned and sent", res, err)
	}
	release()
	got := e.k.ReadTopic(t, e.src)
	if len(got) != 1 {
		t.Fatalf("source got %d records, want 1", len(got))
	}
	short := map[string]string{"a": "[1] at offset 0 of 1", "b": "[0] at offset 0 of 1"}[string(got[0].Key)]
	if !strings.Contains(err.Error(), short) {
		t.Fatalf("error %q does not name the partition not read (%s)", err, short)
	}
}

// A transaction still open at the tail of the DLQ does not hold Inspect
// up: it reads up to the last stable offset, what a read_committed
// consumer can reach, and ends at once without error.
func TestInspectOpenTransactionAtTail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	txn := e.k.Client(t, kgo.TransactionalID(testkit.Name(t, "txn")), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := ctxT(t)
	for i, keys := range [][]string{{"a", "b"}, {"open"}} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			r := spec{key: k, value: "{}", reason: "exception", failedAt: t0, redrives: -1}.record(e.dlqTopic)
			if err := txn.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if i == 0 {
			if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer func() {
		if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Errorf("abort the open transaction: %v", err)
		}
	}()

	start := time.Now()
	var keys []string
	if err := dlq.Inspect(ctx, e.opts, e.dlqTopic, dlq.Filter{}, 0, func(r dlq.Record) error {
		keys = append(keys, string(r.Key))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("keys %v, want a b", keys)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Inspect took %v: it waited for the open transaction", d)
	}
}

// A partition whose records were all removed (retention, DeleteRecords)
// while the scan waited for them has nothing left to read: the scan ends
// without error.
func TestInspectEndsWhenTheRestWasDeleted(t *testing.T) {
	t.Parallel()
	e := fakeEnv(t)
	e.write(t, e.dlqTopic,
		spec{key: "a", value: "1", partition: 0, reason: "exception", failedAt: t0, redrives: -1},
		spec{key: "b", value: "2", partition: 0, reason: "exception", failedAt: t0, redrives: -1})
	_, held := stallFetches(t, e.k.Fake(), 0)
	go func() {
		<-held
		if _, err := e.k.Admin(t).DeleteRecords(ctxT(t), kadm.Offsets{e.dlqTopic: {0: {Topic: e.dlqTopic, Partition: 0, At: 2}}}); err != nil {
			t.Errorf("delete records: %v", err)
		}
	}()
	n := 0
	if err := dlq.Inspect(ctxT(t), e.opts, e.dlqTopic, dlq.Filter{}, 0, func(dlq.Record) error { n++; return nil }); err != nil {
		t.Fatalf("Inspect after the rest of the partition was deleted: %v", err)
	}
	if n != 0 {
		t.Fatalf("%d records, want 0", n)
	}
}
