package trades

import (
	"container/heap"
	"slices"
	"time"

	"github.com/sluicehq/sluice/stages/run"
)

// windowAction is what the digest timer does with a window when it fires.
type windowAction int

const (
	actNone   windowAction = iota
	actForget              // Horizon past its end: tombstone it
	actEmit                // due: emit it
)

// actionAt returns what the timer does at now with window w in state st:
// forget it once now ≥ end + Horizon; else emit it when it is publishing
// (restored mid-publish), or when now ≥ end + Grace, its last change is
// Settle old and it has a pending revision or a partial last emission.
func (c DigestConfig) actionAt(w Window, st WindowState, now time.Time) windowAction {
	if !now.Before(w.End.Add(c.Horizon)) {
		return actForget
	}
	if st.Publishing || !now.Before(w.End.Add(c.Grace)) && now.Sub(st.LastChange) >= c.Settle &&
		(st.Revision > st.EmittedRevision || st.EmittedPartial) {
		return actEmit
	}
	return actNone
}

// checkAt returns the earliest time at which actionAt(w, st, ·) is not
// actNone: the zero time for a publishing window, else the earlier of end
// + Horizon and, with a pending revision or a partial last emission, the
// later of end + Grace and last change + Settle. actionAt is actNone before
// it and not after it (every condition is "now at or past a time").
func (c DigestConfig) checkAt(w Window, st WindowState) time.Time {
	if st.Publishing {
		return time.Time{}
	}
	at := w.End.Add(c.Horizon)
	if st.Revision > st.EmittedRevision || st.EmittedPartial {
		due := w.End.Add(c.Grace)
		if s := st.LastChange.Add(c.Settle); s.After(due) {
			due = s
		}
		if due.Before(at) {
			at = due
		}
	}
	return at
}

// dueIndex indexes one partition's windows (their W| keys) by checkAt, so
// that a timer firing visits the windows whose time has come and no other.
// Its owner (the partition's worker) calls it one call at a time.
type dueIndex struct {
	part  *run.Partition[digestEntry] // the partition it indexes
	items map[string]*dueItem
	h     dueHeap
	// visited counts the items popDue has looked at (for tests: a
	// firing's work is O(due)).
	visited int
}

type dueItem struct {
	key string
	at  time.Time
	i   int // index in h
}

func newDueIndex(part *run.Partition[digestEntry]) *dueIndex {
	return &dueIndex{part: part, items: map[string]*dueItem{}}
}

// set indexes key at at (replacing its earlier time).
func (x *dueIndex) set(key string, at time.Time) {
	if it, ok := x.items[key]; ok {
		if !it.at.Equal(at) {
			it.at = at
			heap.Fix(&x.h, it.i)
		}
		return
	}
	it := &dueItem{key: key, at: at}
	x.items[key] = it
	heap.Push(&x.h, it)
}

// remove drops key from the index.
func (x *dueIndex) remove(key string) {
	if it, ok := x.items[key]; ok {
		heap.Remove(&x.h, it.i)
		delete(x.items, key)
	}
}

// popDue removes and returns the keys indexed at or before now, in key
// order (the order the timer visits windows in).
func (x *dueIndex) popDue(now time.Time) []string {
	var keys []string
	for len(x.h) > 0 && !x.h[0].at.After(now) {
		it := heap.Pop(&x.h).(*dueItem)
		delete(x.items, it.key)
		keys = append(keys, it.key)
		x.visited++
	}
	slices.Sort(keys)
	return keys
}

// len returns the number of windows indexed.
func (x *dueIndex) len() int { return len(x.items) }

type dueHeap []*dueItem

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if c := h[i].at.Compare(h[j].at); c != 0 {
		return c < 0
	}
	return h[i].key < h[j].key
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *dueHeap) Push(x any) {
	it := x.(*dueItem)
	it.i = len(*h)
	*h = append(*h, it)
}
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

// dueOf returns the index of part's windows, building it from the store
// (every window state, as restored) the first time part is seen: a
// partition assigned again is a new *run.Partition and gets a new index.
func (d *digester) dueOf(part *run.Partition[digestEntry]) *dueIndex {
	d.mu.Lock()
	x := d.due[part.Partition()]
	d.mu.Unlock()
	if x != nil && x.part == part {
		return x
	}
	x = newDueIndex(part)
	part.Range("W|", func(key string, e digestEntry) bool {
		if e.Window != nil {
			if _, start, ok := splitStateKey(key, "W|"); ok {
				if w, err := WindowStarting(start); err == nil {
					x.set(key, d.cfg.checkAt(w, *e.Window))
				}
			}
		}
		return true
	})
	d.mu.Lock()
	d.due[part.Partition()] = x
	d.mu.Unlock()
	return x
}

// putWindow writes the state of the user's window w and indexes it.
func (d *digester) putWindow(part *run.Partition[digestEntry], userID string, w Window, st WindowState) error {
	key := WindowStateKey(userID, w)
	if err := part.Put(key, digestEntry{Window: &st}); err != nil {
		return err
	}
	d.dueOf(part).set(key, d.cfg.checkAt(w, st))
	return nil
}
