package run

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// A window holding values counts in the budget what it keeps per record:
// its recOut entry, and the gap entries of records whose offsets are not
// consecutive (a transactional topic's commit markers, a compacted
// topic) and the links of records behind outputs of several keys, as an
// encoded window does (metaBytes).
func TestValueWindowCountsRecordGapsAndLinks(t *testing.T) {
	t.Parallel()
	var keys atomic.Int64
	mem := &heldBytes{b: NewBudget(1 << 40)}
	win := newWindow[kv](valueKV{}, &keys, mem)
	const batches, per = 100, 1000
	for b := range batches {
		offs := make([]int64, per)
		outs := make([][]kv, per)
		for i := range per {
			offs[i] = int64(2 * (b*per + i)) // a marker after every record
			outs[i] = []kv{{"a", fmt.Sprint(i)}, {"b", fmt.Sprint(i)}}
		}
		addKV(t, win, offs, outs)
	}
	if len(win.gaps) != batches*per || len(win.recMore) != batches*per {
		t.Fatalf("%d gaps and %d links, want %d each", len(win.gaps), len(win.recMore), batches*per)
	}
	held := windowRecordOverhead*int64(cap(win.recOut)) + 16*int64(cap(win.gaps)) + 8*int64(cap(win.recMore))
	if win.size < held || mem.windows.Load() != win.size {
		t.Errorf("the window counts %d bytes (budget: %d); its records' entries, gaps and links alone hold %d",
			win.size, mem.windows.Load(), held)
	}
	win.reset()
	if mem.windows.Load() != 0 {
		t.Errorf("%d bytes counted after reset", mem.windows.Load())
	}
}
