package run

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kv is the output of the arena test: a key and its newest value.
type kv struct{ K, V string }

// kvMerger keeps the newest value; it holds outputs encoded as
// "key\x00value".
type kvMerger struct{}

func (kvMerger) MergeKey(o kv) string { return o.K }
func (kvMerger) Merge(_, next kv) kv  { return next }
func (kvMerger) AppendEncoded(d []byte, o kv) []byte {
	return append(append(append(d, o.K...), 0), o.V...)
}
func (kvMerger) Decode(b []byte) (kv, error) {
	k, v, ok := strings.Cut(string(b), "\x00")
	if !ok {
		return kv{}, errors.New("no separator")
	}
	return kv{k, v}, nil
}

// windowValues decodes the outputs of a window of kv outputs, by key.
func windowValues(t *testing.T, win *window[kv]) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := range win.keys() {
		o, err := win.decode(i)
		if err != nil {
			t.Fatal(err)
		}
		out[o.K] = o.V
	}
	return out
}

// A window that holds encodings replaces an output whose new encoding is
// longer at the end of its arena; the bytes left behind are copied out
// (the arena compacted) once they take 1/compactShare of it, so replaced
// encodings do not grow the window's memory without bound, and every
// output still decodes to its key's newest value.
func TestWindowArenaCompacts(t *testing.T) {
	t.Parallel()
	var keys atomic.Int64
	mem := &heldBytes{b: NewBudget(1 << 30)}
	win := newWindow[kv](kvMerger{}, &keys, mem)
	if win.enc == nil {
		t.Fatal("the window does not hold encodings for an Encoder")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	want := map[string]string{}
	const nkeys = 500
	off := int64(0)
	maxArena := int64(0)
	for range 400 {
		batch := make([]*kgo.Record, 50)
		p := &pending[kv]{}
		for i := range batch {
			k := fmt.Sprintf("k%03d", rng.IntN(nkeys))
			v := strings.Repeat("x", 100+rng.IntN(2000))
			batch[i] = &kgo.Record{Offset: off}
			off++
			p.outs = append(p.outs, kv{k, v})
			p.owners = append(p.owners, i)
			want[k] = v
		}
		if _, err := win.add(batch, p); err != nil {
			t.Fatal(err)
		}
		total := int64(0)
		for _, c := range win.arena {
			total += int64(cap(c))
		}
		maxArena = max(maxArena, total)
		if win.dead >= arenaChunk && 4*win.dead >= total {
			t.Fatalf("after a batch %d of %d arena bytes are dead: not compacted", win.dead, total)
		}
	}
	live := int64(0)
	for i := range win.spans {
		live += int64(win.spans[i].n)
	}
	// Without compaction the arena would hold every encoding ever stored
	// that did not fit its slot: about 20 000 × 1 KiB.
	if maxArena > 3*live+2*arenaChunk {
		t.Errorf("arena grew to %d bytes for %d live bytes", maxArena, live)
	}
	if win.keys() != len(want) {
		t.Fatalf("%d keys in the window, want %d", win.keys(), len(want))
	}
	for k, v := range windowValues(t, win) {
		if want[k] != v {
			t.Fatalf("key %s: value of %d bytes, want the newest (%d bytes)", k, len(v), len(want[k]))
		}
	}
	if got := mem.windows.Load(); got != win.size || got <= live {
		t.Errorf("budget counts %d bytes for a window of %d (%d live encoded)", got, win.size, live)
	}
	win.reset()
	if got := mem.windows.Load(); got != 0 {
		t.Errorf("budget counts %d bytes after reset", got)
	}
}

// A window written in parts gives each arena chunk back (to the garbage
// collector and the budget) once every output it holds is written, so the
// budget frees up part by part instead of when the whole window is done;
// the outputs not yet written still decode.
func TestWindowWrittenPartsFreeArena(t *testing.T) {
	t.Parallel()
	var keys atomic.Int64
	mem := &heldBytes{b: NewBudget(1 << 30)}
	win := newWindow[kv](kvMerger{}, &keys, mem)
	p := &pending[kv]{}
	batch := make([]*kgo.Record, 3000)
	for i := range batch {
		batch[i] = &kgo.Record{Offset: int64(i)}
		p.outs = append(p.outs, kv{fmt.Sprintf("k%04d", i), strings.Repeat("v", 500)})
		p.owners = append(p.owners, i)
	}
	if _, err := win.add(batch, p); err != nil {
		t.Fatal(err)
	}
	if len(win.arena) < 4 {
		t.Fatalf("%d arena chunks: too few for the test", len(win.arena))
	}
	before := mem.windows.Load()
	win.countParts()
	half := win.keys() / 2
	freed := win.written(0, half)
	nils := 0
	for _, c := range win.arena {
		if c == nil {
			nils++
		}
	}
	if freed == 0 || nils == 0 || nils == len(win.arena) {
		t.Fatalf("half the outputs written: %d of %d chunks freed (%d bytes)", nils, len(win.arena), freed)
	}
	if got := mem.windows.Load(); got != before-freed || got != win.size {
		t.Errorf("budget counts %d bytes, want %d (window size %d)", got, before-freed, win.size)
	}
	for i := half; i < win.keys(); i++ {
		if o, err := win.decode(i); err != nil || o.K != fmt.Sprintf("k%04d", i) {
			t.Fatalf("output %d after the first half was written: %v, %v", i, o.K, err)
		}
	}
	if win.written(half, win.keys()); mem.windows.Load() >= before-freed-int64(arenaChunk) {
		t.Errorf("every output written: the budget still counts %d bytes", mem.windows.Load())
	}
	win.reset()
	if got := mem.windows.Load(); got != 0 {
		t.Errorf("budget counts %d bytes after reset", got)
	}
}
