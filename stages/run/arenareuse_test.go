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
	want := windowValues(t, win)
	win.countParts()
	done := make([]bool, win.keys())
	for from := 0; from < win.keys(); {
		to, _ := win.partEnd(from, 64<<10)
		win.written(from, to)
		for i := from; i < to; i++ {
			done[win.partOutput(i)] = true
		}
		from = to
		partial := 0
		for c := range win.arena {
			if win.arena[c] != nil && int(win.unwritten[c]) < win.countIn(c) {
				partial++
			}
		}
		if partial > 1 {
			t.Fatalf("after %d of %d outputs: %d chunks partly written", to, win.keys(), partial)
		}
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
