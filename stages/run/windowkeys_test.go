package run

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	rtmetrics "runtime/metrics"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// keyedKV is kvMerger whose encodings ("key\x00value") give their key
// back (EncodedKeyer); badKey makes AppendEncodedKey fail.
type keyedKV struct {
	kvMerger
	badKey bool
}

func (m keyedKV) AppendEncodedKey(dst, enc []byte) ([]byte, error) {
	k, _, ok := bytes.Cut(enc, []byte{0})
	if !ok || m.badKey {
		return dst, errors.New("no key")
	}
	return append(dst, k...), nil
}

// addKV adds one batch of outputs to win, record i at offset offs[i]
// with the outputs outs[i].
func addKV(t *testing.T, win *window[kv], offs []int64, outs [][]kv) {
	t.Helper()
	batch := make([]*kgo.Record, len(offs))
	p := &pending[kv]{}
	for i, off := range offs {
		batch[i] = &kgo.Record{Offset: off}
		for _, o := range outs[i] {
			p.outs = append(p.outs, o)
			p.owners = append(p.owners, i)
		}
	}
	if _, err := win.add(batch, p); err != nil {
		t.Fatal(err)
	}
}

// Keys whose hashes collide (all in one probe chain) are told apart by
// the keys in the arena: each finds its own output, a key not in the
// window finds none, and the index grows past its first table.
func TestWindowIndexSameHash(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("key in the encoding %v", keyed), func(t *testing.T) {
			var m Merger[kv] = kvMerger{}
			if keyed {
				m = keyedKV{}
			}
			var keys atomic.Int64
			win := newWindow(m, &keys, &heldBytes{b: NewBudget(1 << 30)})
			const n, h = 500, 7
			for i := range n {
				win.keyBuf = fmt.Appendf(win.keyBuf[:0], "k%03d", i)
				win.idx.insert(h, int32(i))
				win.store(-1, kv{string(win.keyBuf), fmt.Sprint(i)})
			}
			if len(win.idx.slots) <= minIndexSlots {
				t.Fatalf("%d slots for %d keys: the index did not grow", len(win.idx.slots), n)
			}
			for i := range n {
				g, ok, err := win.find(fmt.Appendf(nil, "k%03d", i), h)
				if err != nil || !ok || g != int32(i) {
					t.Fatalf("key k%03d: output %d, %v, %v; want %d", i, g, ok, err, i)
				}
			}
			if g, ok, err := win.find([]byte("k500"), h); ok || err != nil {
				t.Errorf("a key not in the window found output %d (%v)", g, err)
			}
		})
	}
}

// An encoded window finds keys through its index (whether the key is in
// the arena entry or read from the encoding by an EncodedKeyer): every
// key ends with its newest value, merges are counted, the entries of a
// keyed sink hold no copy of the key, and an EncodedKeyer's error is
// add's.
func TestWindowFindsKeysInArena(t *testing.T) {
	t.Parallel()
	arena := map[bool]int64{}
	nkeys := 0
	for _, keyed := range []bool{false, true} {
		var m Merger[kv] = kvMerger{}
		if keyed {
			m = keyedKV{}
		}
		var keys atomic.Int64
		win := newWindow(m, &keys, &heldBytes{b: NewBudget(1 << 30)})
		rng := rand.New(rand.NewPCG(1, 2))
		want := map[string]string{}
		records := 0
		for b := range 50 {
			var offs []int64
			var outs [][]kv
			for i := range 200 {
				k := fmt.Sprintf("key-%s-%05d", strings.Repeat("x", 40), rng.IntN(5000))
				v := fmt.Sprintf("%d-%d", b, i)
				offs = append(offs, int64(records))
				outs = append(outs, []kv{{k, v}})
				want[k] = v
				records++
			}
			addKV(t, win, offs, outs)
		}
		if win.keys() != len(want) {
			t.Fatalf("keyed %v: %d keys, want %d", keyed, win.keys(), len(want))
		}
		if win.merged != records-len(want) {
			t.Errorf("keyed %v: %d merged, want %d", keyed, win.merged, records-len(want))
		}
		for k, v := range windowValues(t, win) {
			if want[k] != v {
				t.Fatalf("keyed %v: key %s = %q, want %q", keyed, k, v, want[k])
			}
		}
		used := int64(0)
		for i := range win.spans {
			used += int64(len(win.entry(int32(i))))
		}
		arena[keyed] = used
		nkeys = len(want)
	}
	// Each key is 50 bytes; the keyed window's entries hold it once (in the
	// encoding), the other's twice.
	if d := arena[false] - arena[true]; d < 50*int64(nkeys) {
		t.Errorf("entries of %d bytes with the key in the encoding, %d without: %d bytes fewer, want ≥ 50 per key", arena[true], arena[false], d)
	}
	var keys atomic.Int64
	win := newWindow[kv](keyedKV{badKey: true}, &keys, &heldBytes{b: NewBudget(1 << 30)})
	batch := []*kgo.Record{{Offset: 0}, {Offset: 1}}
	p := &pending[kv]{outs: []kv{{"a", "1"}, {"a", "2"}}, owners: []int{0, 1}}
	if _, err := win.add(batch, p); err == nil {
		t.Error("add: no error when the key cannot be read from an encoding")
	}
}

// The records behind each output are known by offset, across gaps in the
// offsets (transaction markers, compaction) and for records with outputs
// of several keys, once per record and output; records without outputs
// are behind none.
func TestWindowRecordsBehindOutputs(t *testing.T) {
	t.Parallel()
	for _, m := range []Merger[kv]{kvMerger{}, valueKV{}} {
		var keys atomic.Int64
		win := newWindow(m, &keys, &heldBytes{b: NewBudget(1 << 30)})
		addKV(t, win, []int64{100, 101, 102, 105}, [][]kv{
			{{"a", "1"}},
			{{"b", "1"}, {"a", "2"}, {"b", "2"}, {"a", "3"}},
			nil,
			{{"c", "1"}, {"c", "2"}},
		})
		addKV(t, win, []int64{106, 1 << 40, 1<<40 + 1}, [][]kv{
			{{"b", "3"}},
			{{"a", "4"}},
			{{"d", "1"}, {"a", "5"}},
		})
		got := map[string][]int64{}
		var order []int64
		win.eachRecord(func(off int64, g int32) {
			k := []string{"a", "b", "c", "d"}[g]
			if n := len(got[k]); n == 0 || got[k][n-1] != off {
				got[k] = append(got[k], off)
			}
			order = append(order, off)
		})
		want := map[string][]int64{"a": {100, 101, 1 << 40, 1<<40 + 1}, "b": {101, 106}, "c": {105}, "d": {1<<40 + 1}}
		for k, offs := range want {
			if !slices.Equal(got[k], offs) {
				t.Errorf("%T: offsets behind %s: %v, want %v", m, k, got[k], offs)
			}
		}
		if !slices.IsSorted(order) {
			t.Errorf("%T: records not in offset order: %v", m, order)
		}
	}
}

// valueKV is kvMerger without its Encoder: a window holding values.
type valueKV struct{}

func (valueKV) MergeKey(o kv) string { return o.K }
func (valueKV) Merge(_, next kv) kv  { return next }

// Encodings that change length from one merge to the next leave holes
// that later entries reuse, and the arena is compacted once its dead
// bytes are 1/compactShare of it: after every batch at most that much is
// dead (beyond a chunk), and on average well under it.
func TestWindowArenaReusesHoles(t *testing.T) {
	t.Parallel()
	var keys atomic.Int64
	win := newWindow[kv](kvMerger{}, &keys, &heldBytes{b: NewBudget(1 << 30)})
	rng := rand.New(rand.NewPCG(3, 4))
	want := map[string]string{}
	off := int64(0)
	var deadShare float64
	const batches = 300
	for range batches {
		var offs []int64
		var outs [][]kv
		for range 200 {
			k := fmt.Sprintf("k%05d", rng.IntN(20000))
			v := strings.Repeat("v", 200+rng.IntN(400))
			offs = append(offs, off)
			off++
			outs = append(outs, []kv{{k, v}})
			want[k] = v
		}
		addKV(t, win, offs, outs)
		if win.dead >= arenaChunk && compactShare*win.dead >= win.arenaBytes {
			t.Fatalf("%d of %d arena bytes dead after a batch", win.dead, win.arenaBytes)
		}
		deadShare += float64(win.dead) / float64(win.arenaBytes)
	}
	if mean := deadShare / batches; mean > 0.5/compactShare+0.01 {
		t.Errorf("on average %.3f of the arena dead, want about half of 1/%d at most", mean, compactShare)
	}
	for k, v := range windowValues(t, win) {
		if want[k] != v {
			t.Fatalf("key %s: value of %d bytes, want %d", k, len(v), len(want[k]))
		}
	}
}

// What an encoded window counts in the memory budget is the heap it
// holds: within a few percent of what its reset frees (read with
// runtime/metrics after forced collections), and after reset nothing is
// counted (windows used to count a constant 96 bytes per key for what
// took about 70 on the silver corpus, and 8 bytes per record offset).
// Not parallel: it reads the process's live heap.
func TestEncodedWindowCountsItsHeap(t *testing.T) {
	live := func() int64 {
		s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
		runtime.GC()
		runtime.GC()
		rtmetrics.Read(s)
		return int64(s[0].Value.Uint64())
	}
	rng := rand.New(rand.NewPCG(5, 6))
	const n, batch = 300_000, 1000
	outs := make([][]kv, n)
	offs := make([]int64, n)
	for i := range outs {
		outs[i] = []kv{{fmt.Sprintf("key%06d", rng.IntN(n/3)), strings.Repeat("v", 40+rng.IntN(40))}}
		offs[i] = int64(i)
	}
	mem := &heldBytes{b: NewBudget(1 << 30)}
	var keys atomic.Int64
	win := newWindow[kv](kvMerger{}, &keys, mem)
	for i := 0; i < n; i += batch {
		addKV(t, win, offs[i:i+batch], outs[i:i+batch])
	}
	nkeys := float64(win.keys())
	counted, held := mem.windows.Load(), live()
	win.reset()
	freed := held - live()
	t.Logf("%.0f keys: %d bytes counted, reset freed %d (%.1f and %.1f per key)", nkeys, counted, freed,
		float64(counted)/nkeys, float64(freed)/nkeys)
	if counted < freed*95/100 || counted > freed*105/100 {
		t.Errorf("the window counts %d bytes in the budget for %d bytes of heap", counted, freed)
	}
	if got := mem.windows.Load(); got != 0 {
		t.Errorf("%d bytes counted after reset", got)
	}
	runtime.KeepAlive(win)
	runtime.KeepAlive(outs)
	runtime.KeepAlive(offs)
}
