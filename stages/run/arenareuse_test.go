package run

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
)

// chunkBase identifies an arena chunk by its backing array.
func chunkBase(c []byte) *byte { return &c[:cap(c)][0] }

// scatteredWindow fills a kv window whose encodings change length from one
// batch to the next (entries move, holes are reused, the arena is
// compacted), checking after every batch that each output decodes to its
// key's newest value and, after every compaction, that the compaction
// reused the old chunks (at most two new ones). It returns the window and
// the number of compactions.
func scatteredWindow(t *testing.T, mem *heldBytes) (*window[kv], int) {
	t.Helper()
	var keys atomic.Int64
	win := newWindow[kv](kvMerger{}, &keys, mem)
	rng := rand.New(rand.NewPCG(21, 22))
	want := map[string]string{}
	off := int64(0)
	compactions := 0
	for range 200 {
		before := map[*byte]bool{}
		for _, c := range win.arena {
			before[chunkBase(c)] = true
		}
		dead0 := win.dead
		var offs []int64
		var outs [][]kv
		for range 300 {
			k := fmt.Sprintf("k%05d", rng.IntN(6000))
			v := strings.Repeat(string(rune('a'+rng.IntN(26))), 50+rng.IntN(700))
			offs, outs = append(offs, off), append(outs, []kv{{k, v}})
			want[k] = v
			off++
		}
		addKV(t, win, offs, outs)
		for k, v := range windowValues(t, win) {
			if want[k] != v {
				t.Fatalf("key %s: %.10q… (%d bytes), want %.10q… (%d bytes)", k, v, len(v), want[k], len(want[k]))
			}
		}
		if dead0 > 0 && win.dead == 0 { // compacted: add ends with compact, which leaves no dead byte
			compactions++
			fresh := 0
			for _, c := range win.arena {
				if !before[chunkBase(c)] {
					fresh++
				}
			}
			if fresh > 2 {
				t.Fatalf("compaction %d: %d of %d chunks newly allocated, want the old ones reused", compactions, fresh, len(win.arena))
			}
		}
	}
	if compactions < 3 {
		t.Fatalf("%d compactions: too few for the test", compactions)
	}
	return win, compactions
}

// Compacting an encoded window copies its entries into the chunks it
// already holds (each old chunk once its own entries are copied out),
// never over an entry not yet copied: every output still decodes to its
// newest value, the arena's accounting matches its chunks, and a
// compaction allocates at most two chunks.
func TestWindowCompactionReusesChunks(t *testing.T) {
	t.Parallel()
	mem := &heldBytes{b: NewBudget(1 << 30)}
	win, n := scatteredWindow(t, mem)
	t.Logf("%d compactions, %d chunks", n, len(win.arena))
	if want := win.arenaBytes + win.metaBytes(); win.size != want || mem.windows.Load() != want {
		t.Fatalf("size %d, budget %d, want arena %d + meta %d", win.size, mem.windows.Load(), win.arenaBytes, win.metaBytes())
	}
	capSum := int64(0)
	for _, c := range win.arena {
		capSum += int64(cap(c))
	}
	if capSum != win.arenaBytes {
		t.Fatalf("arena chunks of %d bytes, %d counted", capSum, win.arenaBytes)
	}
	win.reset()
	if mem.windows.Load() != 0 {
		t.Fatalf("%d bytes counted after reset", mem.windows.Load())
	}
}

// A window whose outputs are scattered over its arena (moved entries,
// reused holes, compactions that keep the arena's order) is written in
// parts that follow the arena: written in order, at most one chunk holds
// both written and unwritten outputs at any time, so the window's memory
// is given back part by part; the outputs not yet written still decode.
func TestWindowPartsFollowTheArena(t *testing.T) {
	t.Parallel()
	mem := &heldBytes{b: NewBudget(1 << 30)}
	win, _ := scatteredWindow(t, mem)
	writeInParts(t, win, 64<<10, func(to int) {
		partial := 0
		for c := range win.arena {
			if win.arena[c] != nil && int(win.unwritten[c]) < win.countIn(c) {
				partial++
			}
		}
		if partial > 1 {
			t.Fatalf("after %d of %d outputs: %d chunks partly written", to, win.keys(), partial)
		}
	})
	if win.arenaBytes != 0 || mem.windows.Load() != win.size {
		t.Fatalf("every part written: arena %d bytes, budget %d, size %d", win.arenaBytes, mem.windows.Load(), win.size)
	}
	win.reset()
}

// countIn returns the number of outputs in arena chunk c.
func (win *window[Out]) countIn(c int) int {
	n := 0
	for _, s := range win.spans {
		if int(s.chunk) == c {
			n++
		}
	}
	return n
}

// Windows sharing a chunk pool (a runner's) take the chunks another
// window's written parts gave back: a chunk is given back only once every
// output in it is written, so a window filling its new chunks while
// another is written part by part never overwrites an output not yet
// written, and the chunks do get reused.
func TestWindowChunkPoolReusesOnlyWrittenChunks(t *testing.T) {
	t.Parallel()
	var pool chunkPool
	var keys atomic.Int64
	mem := &heldBytes{b: NewBudget(1 << 30)}
	a, _ := scatteredWindow(t, mem)
	a.pool = &pool
	b := newWindow[kv](kvMerger{}, &keys, mem)
	b.pool = &pool
	given := map[*byte]bool{}
	for _, c := range a.arena {
		given[chunkBase(c)] = true
	}
	reused := 0
	writeInParts(t, a, 4<<10, func(to int) {
		// b takes a chunk from the pool (the one given back last, if
		// any) and fills it.
		fill := strings.Repeat("#", arenaChunk-64)
		addKV(t, b, []int64{int64(to)}, [][]kv{{{fmt.Sprintf("b%06d", to), fill}}})
		if given[chunkBase(b.arena[0])] {
			reused++
		}
		if o, err := b.decode(0); err != nil || o.V != fill {
			t.Fatalf("second window: %q, %v", o.K, err)
		}
		b.reset()
	})
	if reused == 0 {
		t.Fatal("the second window never took a chunk the first gave back")
	}
	a.reset()
	b.reset()
}

// writeInParts has win's outputs written part by part (parts of about
// partBytes, in order), calling after with the position written up to
// after each part, then checking that every output not yet written still
// decodes to its value before the first part.
func writeInParts(t *testing.T, win *window[kv], partBytes int64, after func(to int)) {
	t.Helper()
	want := windowValues(t, win)
	win.countParts()
	done := make([]bool, win.keys())
	for from := 0; from < win.keys(); {
		to, _ := win.partEnd(from, partBytes)
		win.written(from, to)
		for i := from; i < to; i++ {
			done[win.partOutput(i)] = true
		}
		from = to
		after(to)
		for i := range win.keys() {
			if done[i] {
				continue
			}
			o, err := win.decode(i)
			if err != nil || want[o.K] != o.V {
				t.Fatalf("output %d unwritten after %d: %q, %v", i, to, o.K, err)
			}
		}
	}
}
