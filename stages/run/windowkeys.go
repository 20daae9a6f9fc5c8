package run

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sync"
)

// A window that holds encoded outputs (see [Encoder]) keeps each output's
// key in its arena entry, in front of the encoding, and finds outputs by
// key with a keyIndex over the entries instead of a map[string]int32: the
// map's entries, growth and one string allocation per key took about 70
// bytes of heap per key of the silver benchmark besides the key's bytes,
// the index takes 8–16 (its slots) and the entry a byte or two of length.
//
// An arena entry is the key's length (uvarint), the key, then the
// encoding, within room bytes (span.room ≥ the bytes used): an encoding
// that grows beyond its room moves to a new entry, and its old one becomes
// a hole that a later entry of about its size reuses (holes), so that
// outputs whose encodings change length from one merge to the next do not
// leave the arena a fifth dead between compactions.

// keyIndex maps keys to output indexes with open addressing (linear
// probing). A slot holds the key's 32-bit hash and the output index + 1
// (0: empty); keys are compared in the arena. A hash's first slot is its
// fraction of the table (h × len / 2^32), so the table can grow by half
// rather than double (a mean load of 5/8 instead of 9/16).
type keyIndex struct {
	seed  maphash.Seed
	slots []uint64
	n     int
}

// minIndexSlots is the table size of a window's first key.
const minIndexSlots = 64

// hashKey returns the hash the index stores for key.
func (x *keyIndex) hashKey(key []byte) uint32 {
	return uint32(maphash.Bytes(x.seed, key) >> 32)
}

// find returns the index of the encoded window's output whose key is key
// (of hash h). Its error is one of the sink's EncodedKeyer.
func (win *window[Out]) find(key []byte, h uint32) (int32, bool, error) {
	x := &win.idx
	if len(x.slots) == 0 {
		return 0, false, nil
	}
	for i := x.home(h); ; i = x.next(i) {
		s := x.slots[i]
		if s == 0 {
			return 0, false, nil
		}
		if uint32(s>>32) != h {
			continue
		}
		g := int32(uint32(s)) - 1
		k, err := win.keyOf(g)
		if err != nil {
			return 0, false, err
		}
		if bytes.Equal(k, key) {
			return g, true, nil
		}
	}
}

// home returns the first slot of hash h.
func (x *keyIndex) home(h uint32) int {
	return int(uint64(h) * uint64(len(x.slots)) >> 32)
}

// next returns the slot after i.
func (x *keyIndex) next(i int) int {
	if i++; i == len(x.slots) {
		return 0
	}
	return i
}

// insert adds output g, whose key (of hash h) is not in the index. The
// table grows by half once it is three quarters full.
func (x *keyIndex) insert(h uint32, g int32) {
	if 4*(x.n+1) > 3*len(x.slots) {
		x.grow()
	}
	x.put(uint64(h)<<32 | uint64(uint32(g+1)))
	x.n++
}

func (x *keyIndex) put(s uint64) {
	i := x.home(uint32(s >> 32))
	for x.slots[i] != 0 {
		i = x.next(i)
	}
	x.slots[i] = s
}

func (x *keyIndex) grow() {
	old := x.slots
	x.slots = make([]uint64, max(minIndexSlots, len(old)+len(old)/2))
	for _, s := range old {
		if s != 0 {
			x.put(s)
		}
	}
}

// reset empties the index, dropping a large table (its memory would stay
// with the worker between windows, outside the budget).
func (x *keyIndex) reset() {
	x.n = 0
	if len(x.slots) > minIndexSlots {
		x.slots = nil
		return
	}
	clear(x.slots)
}

// bytes returns the heap the index holds.
func (x *keyIndex) bytes() int64 { return 8 * int64(cap(x.slots)) }

// Holes: entries left by encodings that moved, reused by later entries.
// holes[c] lists those of room c×holeGrain to (c+1)×holeGrain-1 bytes; a
// larger one stays dead until the arena is compacted.
const (
	holeGrain   = 32
	holeClasses = 128
	// holeReach is how many classes above the smallest that fits alloc
	// looks in: an entry placed in a larger hole keeps the difference as
	// room to grow in place.
	holeReach = 8
)

// hole is a free arena entry.
type hole struct{ chunk, off, room int32 }

// entryKey returns the key of the arena entry e and the offset of its
// encoding in e.
func entryKey(e []byte) (key []byte, enc int) {
	n, w := binary.Uvarint(e)
	return e[w : w+int(n)], w + int(n)
}

// entry returns output i's arena entry (key and encoding, without the
// room left after them).
func (win *window[Out]) entry(i int32) []byte {
	s := win.spans[i]
	return win.arena[s.chunk][s.off : s.off+s.room]
}

// keyOf returns output i's key (encoded window): from its entry, or read
// from its encoding by the sink's EncodedKeyer (valid until the next
// call).
func (win *window[Out]) keyOf(i int32) ([]byte, error) {
	if win.encKey == nil {
		k, _ := entryKey(win.entry(i))
		return k, nil
	}
	b, err := win.encKey.AppendEncodedKey(win.cmpBuf[:0], win.encoded(int(i)))
	if err != nil {
		return nil, fmt.Errorf("window: read the key of an output encoded by %T: %w", win.enc, err)
	}
	win.cmpBuf = b
	return b, nil
}

// encoded returns output i's encoding (encoded window).
func (win *window[Out]) encoded(i int) []byte {
	e := win.entry(int32(i))
	_, at := entryKey(e)
	return e[at : at+int(win.spans[i].n)]
}

// alloc returns room for an entry of need bytes: a hole when one of about
// that size is free, else the end of the arena (a new chunk when the last
// one is full, counted in win.size and win.arenaBytes). The entry's bytes
// count as live (not in win.dead).
func (win *window[Out]) alloc(need int) span {
	if c := (need + holeGrain - 1) / holeGrain; c < holeClasses {
		for cl := c; cl < min(c+holeReach, holeClasses); cl++ {
			if hs := win.holes[cl]; len(hs) > 0 {
				h := hs[len(hs)-1]
				win.holes[cl] = hs[:len(hs)-1]
				win.dead -= int64(need)
				return span{chunk: h.chunk, off: h.off, room: h.room}
			}
		}
	}
	last := len(win.arena) - 1
	if last < 0 || cap(win.arena[last])-len(win.arena[last]) < need {
		c := max(arenaChunk, need)
		win.arena = append(win.arena, win.pool.get(c))
		win.size += int64(c)
		win.arenaBytes += int64(c)
		last++
	}
	off := len(win.arena[last])
	win.arena[last] = win.arena[last][:off+need]
	return span{chunk: int32(last), off: int32(off), room: int32(need)}
}

// free makes the entry at s a hole (its bytes are already counted dead).
func (win *window[Out]) free(s span) {
	if c := int(s.room) / holeGrain; c > 0 && c < holeClasses {
		win.holes[c] = append(win.holes[c], hole{s.chunk, s.off, s.room})
	}
}

// clearHoles forgets the holes (the arena is new or being dropped).
func (win *window[Out]) clearHoles() {
	for i := range win.holes {
		win.holes[i] = win.holes[i][:0]
	}
}

// metaBytes returns the heap of an encoded window besides its arena: the
// index, the spans, the records' outputs and offsets and the hole lists,
// by capacity.
func (win *window[Out]) metaBytes() int64 {
	n := win.idx.bytes() + 16*int64(cap(win.spans)) + win.recBytes()
	for _, hs := range win.holes {
		n += 12 * int64(cap(hs))
	}
	return n
}

// recBytes returns the heap of what a window keeps per record (recOut,
// recMore and gaps), by capacity: counted in the budget by windows of
// encoded outputs (metaBytes) and of values alike.
func (win *window[Out]) recBytes() int64 {
	return windowRecordOverhead*int64(cap(win.recOut)) + 8*int64(cap(win.recMore)) + 16*int64(cap(win.gaps))
}

// compactShare: the arena is compacted once its dead bytes are
// 1/compactShare of it.
const compactShare = 16

// chunkPool keeps the arena chunks (of arenaChunk bytes) that windows
// freed, for the chunks they allocate next: a backlog's windows otherwise
// allocate (and clear) their arena anew one after the other. A chunk is
// put only once no entry in it is read again (window.written: its outputs
// are written and decoded, and a decoding never refers to the encoding,
// see [Encoder]; compact: its entries are copied). The pool's chunks are
// not counted in the memory budget, as the garbage they would otherwise
// be is not: a sync.Pool gives them up to the garbage collector within
// two collections when no window takes them. Safe for concurrent use.
type chunkPool struct{ p sync.Pool }

// get returns an empty chunk of capacity c: a pooled one when c is
// arenaChunk and the pool has one, else a new one.
func (cp *chunkPool) get(c int) []byte {
	if cp != nil && c == arenaChunk {
		if a, ok := cp.p.Get().(*[arenaChunk]byte); ok {
			return a[:0]
		}
	}
	return make([]byte, 0, c)
}

// put gives chunk back for reuse when it is of arenaChunk bytes; the
// caller no longer reads or writes it.
func (cp *chunkPool) put(chunk []byte) {
	if cp != nil && cap(chunk) == arenaChunk {
		cp.p.Put((*[arenaChunk]byte)(chunk[:arenaChunk]))
	}
}
