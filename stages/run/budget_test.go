package run_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// blob is the output of the budget tests: a key, how many records it
// stands for, and the newest record's value (the bulk of the memory).
type blob struct {
	Key   string
	Count int
	Last  string
}

func toBlob(_ context.Context, m msg) ([]blob, error) {
	return []blob{{Key: m.Key, Count: 1, Last: m.Value}}, nil
}

// blobSink is a run.Merger that keeps, per key, the count and a hash of
// the newest value only (so that it holds little memory itself), and
// records the size of every Write. reject refuses the merged output of
// that key.
type blobSink struct {
	mu     sync.Mutex
	state  map[string]blobState
	writes []int
	reject string
}

type blobState struct {
	count int
	last  uint64 // hash of the newest value
}

// newBlobSink returns a sink sized for keys keys, so that its map does not
// grow during a run (the heap test counts what grows).
func newBlobSink(keys int) *blobSink {
	return &blobSink{state: make(map[string]blobState, keys)}
}

func (s *blobSink) MergeKey(b blob) string { return b.Key }

func (s *blobSink) Merge(old, next blob) blob {
	return blob{Key: next.Key, Count: old.Count + next.Count, Last: next.Last}
}

func (s *blobSink) Write(_ context.Context, batch []blob) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes = append(s.writes, len(batch))
	var rej stages.Rejections
	for i, b := range batch {
		if b.Key == s.reject {
			rej.Items = append(rej.Items, stages.Rejection{Index: i, Rule: "test.refused", Err: errors.New("refused")})
			continue
		}
		st := s.state[b.Key]
		s.state[b.Key] = blobState{count: st.count + b.Count, last: hash(b.Last)}
	}
	if len(rej.Items) > 0 {
		return &rej
	}
	return nil
}

func (s *blobSink) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.state {
		n += st.count
	}
	return n
}

// encodedBlobSink is a blobSink whose outputs windows hold encoded
// (run.Encoder).
type encodedBlobSink struct{ *blobSink }

func (encodedBlobSink) AppendEncoded(dst []byte, b blob) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b.Key)))
	dst = append(dst, b.Key...)
	dst = binary.AppendUvarint(dst, uint64(b.Count))
	return append(dst, b.Last...)
}

func (encodedBlobSink) Decode(p []byte) (blob, error) {
	kl, n := binary.Uvarint(p)
	if n <= 0 || uint64(len(p)-n) < kl {
		return blob{}, errors.New("corrupt blob")
	}
	key := string(p[n : n+int(kl)])
	p = p[n+int(kl):]
	c, n := binary.Uvarint(p)
	if n <= 0 {
		return blob{}, errors.New("corrupt blob")
	}
	return blob{Key: key, Count: int(c), Last: string(p[n:])}, nil
}

// keyedBlobSink is an encodedBlobSink whose encodings give their key back
// (run.EncodedKeyer): windows then hold no copy of it.
type keyedBlobSink struct{ encodedBlobSink }

func (keyedBlobSink) AppendEncodedKey(dst, p []byte) ([]byte, error) {
	kl, n := binary.Uvarint(p)
	if n <= 0 || uint64(len(p)-n) < kl {
		return dst, errors.New("corrupt blob")
	}
	return append(dst, p[n:n+int(kl)]...), nil
}

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// produceBlobs produces n records of random, uncompressed values (so that
// the broker and the client hold them at full size) of size/2 to size
// bytes (so that a merged output's encoding changes length) with keys
// "k-%05d" of i%keys, and returns what each key's merged output must be:
// the count of its records and the hash of the newest value.
func produceBlobs(t *testing.T, k *testkit.Kafka, topic string, n, keys, size int) map[string]blobState {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), uint64(keys)))
	want := map[string]blobState{}
	cl := k.Client(t, kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs := make([]*kgo.Record, 0, 1000)
	for i := range n {
		v := make([]byte, size/2+rng.IntN(size/2+1))
		for j := range v {
			v[j] = byte('a' + rng.IntN(26))
		}
		key := fmt.Sprintf("k-%05d", i%keys)
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(key), Value: v})
		want[key] = blobState{count: want[key].count + 1, last: hash(string(v))}
		if len(recs) == cap(recs) || i == n-1 {
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			recs = recs[:0]
		}
	}
	return want
}

// liveHeap samples the heap the garbage collector found live
// (/gc/heap/live:bytes) after a forced collection every interval until
// stop is called, which returns the highest sample.
func liveHeap(interval time.Duration) (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	read := func() uint64 {
		runtime.GC()
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	done, out := make(chan struct{}), make(chan uint64)
	go func() {
		peak := read()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				out <- max(peak, read())
				return
			case <-t.C:
				peak = max(peak, read())
			}
		}
	}()
	return func() uint64 { close(done); return <-out }
}

// A backlog several times larger than the memory budget goes through
// coalescing windows whose own bounds (keys, age) would hold all of it:
// the windows close early when the budget is full and fetches pause, so
// the live heap stays within the budget plus a few batches, while every
// record is written with the merge semantics of an unbounded window (per
// key: the count of its records, the newest value) and committed. Both
// ways a window holds outputs are checked: as values and encoded
// (run.Encoder, with and without run.EncodedKeyer). The live heap is read with runtime/metrics after forced
// collections, so the test does not run in parallel with others.
func TestBudgetBoundsHeapUnderBacklog(t *testing.T) {
	const (
		n, keys = 48_000, 40_000
		size    = 2 << 10 // at most, per value: 70 MiB of records, 59 MiB in the newest value of each key
		budget  = 8 << 20
	)
	for _, tc := range []struct {
		name string
		sink func(*blobSink) stages.Sink[blob]
	}{
		{"values", func(s *blobSink) stages.Sink[blob] { return s }},
		{"encoded", func(s *blobSink) stages.Sink[blob] { return encodedBlobSink{s} }},
		{"encoded, key in the encoding", func(s *blobSink) stages.Sink[blob] { return keyedBlobSink{encodedBlobSink{s}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := testkit.NewKafka(t, testkit.FakeOK())
			cfg := baseConfig(t, k, 4)
			cfg.BatchMaxRecords, cfg.MaxInFlight = 200, 400
			cfg.Window = run.WindowConfig{MaxKeys: 1 << 20, MaxAge: 10 * time.Minute}
			want := produceBlobs(t, k, cfg.Topics[0], n, keys, size)
			sink := newBlobSink(keys)
			reg := prometheus.NewRegistry()
			base := liveHeap(time.Hour)()
			peakOf := liveHeap(20 * time.Millisecond)
			_, stop := start(t, k, cfg, toBlob, tc.sink(sink), run.WithRegisterer(reg), run.WithBudget(run.NewBudget(budget)))
			testkit.WaitFor(t, 2*time.Minute, "every record written", func() bool { return sink.total() == n })
			peak := peakOf()
			stopWhenCommitted(t, k, cfg, n, 30*time.Second, stop)
			grown := int64(peak) - int64(base)
			t.Logf("live heap %d MiB before, peak %d MiB (+%d MiB) for %d MiB of records with a %d MiB budget; %d writes",
				base>>20, peak>>20, grown>>20, n*size*3/4>>20, budget>>20, len(sink.writes))
			// The budget, one poll (MaxInFlight records) and one batch per
			// partition of overshoot, the writes in progress and the
			// client's fetch buffers: well below the 59 MiB unbounded
			// windows hold at the end of the backlog. An in-process kfake
			// broker's own fetch buffers count too. A heap profile at a
			// 30 MiB peak on a loaded machine (three busy loops on two
			// cores) held 9.5 MiB of fetch responses (a record still
			// queued or in a batch keeps its whole response), 7 MiB of
			// window chunks, 4.6 MiB of window parts decoded for their
			// Write and 2 MiB of decoded batches; the growth reached
			// 29 MiB there in 2 of about 110 runs, against 12–21 MiB on a
			// quiet machine.
			limit := int64(3*budget + 8<<20)
			if k.Kind == "kfake" {
				limit += 24 << 20
			}
			if grown > limit {
				t.Errorf("live heap grew by %d MiB, want ≤ %d MiB (budget %d MiB)", grown>>20, limit>>20, budget>>20)
			}
			for key, w := range want {
				if got := sink.state[key]; got != w {
					t.Fatalf("key %s: count %d hash %x, want count %d hash %x", key, got.count, got.last, w.count, w.last)
				}
			}
			if c := testkit.Metric(t, reg, "sluice_window_budget_closes_total"); c == 0 {
				t.Errorf("sluice_window_budget_closes_total = 0: no window was closed early by the budget")
			}
			for _, kind := range []string{"records", "windows"} {
				if v := testkit.Metric(t, reg, "sluice_memory_held_bytes", "kind", kind); v != 0 {
					t.Errorf("sluice_memory_held_bytes{kind=%s} = %v after the run, want 0", kind, v)
				}
			}
			if v := testkit.Metric(t, reg, "sluice_memory_budget_bytes"); v != budget {
				t.Errorf("sluice_memory_budget_bytes = %v, want %d", v, budget)
			}
		})
	}
}

// Sizes of partsBacklog: 4.5 MiB of encodings in one window, written in
// parts of 2 MiB with a 64 MiB budget.
const partsN, partsKeys = 9000, 3000

// partsBacklog returns a one-partition topic holding partsN records of
// partsKeys keys with values of 1–2 KiB (produceBlobs), and a config whose
// window holds them all; want is what produceBlobs returned.
func partsBacklog(t *testing.T) (*testkit.Kafka, run.Config, map[string]blobState) {
	t.Helper()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.BatchMaxRecords, cfg.MaxInFlight = 1000, 2000
	cfg.Window = run.WindowConfig{MaxKeys: 1 << 20, MaxAge: time.Minute}
	return k, cfg, produceBlobs(t, k, cfg.Topics[0], partsN, partsKeys, 2<<10)
}

// A window that holds its outputs encoded is written in parts of bounded
// size (a 32nd of the budget, 1–16 MiB of encodings): each part is
// one Write, and a rejection's index, relative to its part, still
// dead-letters every record of the refused key, in whichever part it is.
// The other keys land with the merge of all their records.
func TestEncodedWindowWrittenInPartsMapsRejections(t *testing.T) {
	t.Parallel()
	k, cfg, want := partsBacklog(t)
	const n, keys = partsN, partsKeys
	const refused = "k-02999" // first seen last: in the last part of the window
	sink := newBlobSink(keys)
	sink.reject = refused
	_, stop := start(t, k, cfg, toBlob, stages.Sink[blob](encodedBlobSink{sink}), run.WithBudget(run.NewBudget(64<<20)))
	stopWhenCommitted(t, k, cfg, n, time.Minute, stop)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.writes) < 3 {
		t.Errorf("%d writes (%v) of %d keys: the window was not written in parts", len(sink.writes), sink.writes, keys)
	}
	for key, w := range want {
		got := sink.state[key]
		if key == refused {
			w = blobState{}
		}
		if got != w {
			t.Errorf("key %s: count %d hash %x, want count %d hash %x", key, got.count, got.last, w.count, w.last)
		}
	}
	dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
	if len(dlq) != n/keys {
		t.Fatalf("DLQ has %d records, want the %d records of key %s", len(dlq), n/keys, refused)
	}
	for _, d := range dlq {
		if string(d.Key) != refused {
			t.Errorf("dead letter of key %s, want only %s", d.Key, refused)
		}
		if r, _ := testkit.Header(d, stages.HeaderRule); r != "test.refused" {
			t.Errorf("dead letter rule %q, want test.refused", r)
		}
	}
}
