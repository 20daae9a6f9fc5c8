package run

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// catKV merges by appending: next's value is appended to old's, unless it
// starts with '=', which replaces it. Merged encodings grow past their
// room again and again and sometimes shrink, and the merged value
// records the order of the merges.
type catKV struct{ kvMerger }

func (catKV) Merge(old, next kv) kv {
	if strings.HasPrefix(next.V, "=") {
		return kv{old.K, next.V[1:]}
	}
	return kv{old.K, old.V + next.V}
}

// catKeyedKV is catKV whose encodings give their key back (EncodedKeyer).
type catKeyedKV struct{ catKV }

func (catKeyedKV) AppendEncodedKey(dst, enc []byte) ([]byte, error) {
	k, _, ok := bytes.Cut(enc, []byte{0})
	if !ok {
		return dst, errors.New("no key")
	}
	return append(dst, k...), nil
}

// catMergedKV is catKeyedKV merging into encodings (EncodedMerger).
type catMergedKV struct{ catKeyedKV }

func (m catMergedKV) AppendMerged(dst, old []byte, next kv) ([]byte, error) {
	o, err := m.Decode(old)
	if err != nil {
		return dst, err
	}
	return m.AppendEncoded(dst, m.Merge(o, next)), nil
}

// catValueKV is catKV without its Encoder: a window holding values.
type catValueKV struct{}

func (catValueKV) MergeKey(o kv) string  { return o.K }
func (catValueKV) Merge(old, next kv) kv { return catKV{}.Merge(old, next) }

// collidingKeys returns pairs of distinct keys whose 32-bit index hashes
// are equal under seed (a birthday search).
func collidingKeys(seed maphash.Seed, pairs int) [][2]string {
	x := keyIndex{seed: seed}
	seen := map[uint32]string{}
	var out [][2]string
	for i := 0; len(out) < pairs; i++ {
		k := fmt.Sprintf("c%d", i)
		h := x.hashKey([]byte(k))
		if o, ok := seen[h]; ok {
			out = append(out, [2]string{o, k})
			continue
		}
		seen[h] = k
	}
	return out
}

// windowRef is the naive reference of a window: every output merged in
// order into a map, the keys in order of first appearance, and the
// offsets of the records behind each key.
type windowRef struct {
	m      Merger[kv]
	vals   map[string]kv
	order  []string
	behind map[string]map[int64]bool
	merged int
}

func (r *windowRef) add(off int64, o kv) {
	k := r.m.MergeKey(o)
	if old, ok := r.vals[k]; ok {
		r.vals[k] = r.m.Merge(old, o)
		r.merged++
	} else {
		r.vals[k] = o
		r.order = append(r.order, k)
		r.behind[k] = map[int64]bool{}
	}
	r.behind[k][off] = true
}

// checkWindow compares win with ref: its outputs (in order), the records
// behind each, its merge count, and its arena's accounting (entries
// within their chunks and not overlapping, dead bytes, the bytes counted
// in the budget).
func checkWindow(t *testing.T, win *window[kv], ref *windowRef, mem *heldBytes) {
	t.Helper()
	if win.keys() != len(ref.order) {
		t.Fatalf("%d outputs, want %d", win.keys(), len(ref.order))
	}
	for i, k := range ref.order {
		var o kv
		if win.enc == nil {
			o = win.outs[i]
		} else {
			var err error
			if o, err = win.decode(i); err != nil {
				t.Fatalf("output %d: %v", i, err)
			}
		}
		if o != ref.vals[k] {
			t.Fatalf("output %d: %q = %.40q (%d bytes), want %q = %.40q (%d bytes)", i, o.K, o.V, len(o.V), k, ref.vals[k].V, len(ref.vals[k].V))
		}
	}
	if win.merged != ref.merged {
		t.Fatalf("%d merged, want %d", win.merged, ref.merged)
	}
	got := map[string]map[int64]bool{}
	last := int64(-1 << 62)
	win.eachRecord(func(off int64, g int32) {
		if off < last {
			t.Fatalf("offset %d after %d", off, last)
		}
		last = off
		k := ref.order[g]
		if got[k] == nil {
			got[k] = map[int64]bool{}
		}
		got[k][off] = true
	})
	for _, k := range ref.order {
		if !maps.Equal(got[k], ref.behind[k]) {
			t.Fatalf("key %.20q: records %v, want %v", k, slices.Sorted(maps.Keys(got[k])), slices.Sorted(maps.Keys(ref.behind[k])))
		}
	}
	if win.enc == nil {
		return
	}
	// Arena accounting: entries inside their chunk, disjoint, dead bytes
	// what no entry uses, holes outside live entries.
	type ext struct{ lo, hi int32 }
	used := make([][]ext, len(win.arena))
	live := int64(0)
	for i, s := range win.spans {
		if int(s.chunk) >= len(win.arena) || int(s.off+s.room) > len(win.arena[s.chunk]) {
			t.Fatalf("output %d: span %+v outside its chunk", i, s)
		}
		_, at := entryKey(win.entry(int32(i)))
		if at+int(s.n) > int(s.room) {
			t.Fatalf("output %d: %d bytes used in a room of %d", i, at+int(s.n), s.room)
		}
		live += int64(at) + int64(s.n)
		used[s.chunk] = append(used[s.chunk], ext{s.off, s.off + s.room})
	}
	for _, hs := range win.holes {
		for _, h := range hs {
			used[h.chunk] = append(used[h.chunk], ext{h.off, h.off + h.room})
		}
	}
	filled := int64(0)
	for c, es := range used {
		filled += int64(len(win.arena[c]))
		slices.SortFunc(es, func(a, b ext) int { return int(a.lo - b.lo) })
		for i := 1; i < len(es); i++ {
			if es[i].lo < es[i-1].hi {
				t.Fatalf("chunk %d: entries or holes %v and %v overlap", c, es[i-1], es[i])
			}
		}
	}
	if win.dead != filled-live {
		t.Fatalf("%d bytes counted dead, %d are (%d filled, %d live)", win.dead, filled-live, filled, live)
	}
	if want := win.arenaBytes + win.metaBytes(); win.size != want {
		t.Fatalf("size %d, want arena %d + meta %d", win.size, win.arenaBytes, win.metaBytes())
	}
	if mem.windows.Load() != win.size {
		t.Fatalf("budget counts %d bytes, the window %d", mem.windows.Load(), win.size)
	}
}

// A window merges what a map merging every output in order holds, and
// knows the records behind each output, whatever its keys (empty,
// prefixes of one another, long ones, keys of equal 32-bit hash),
// whatever its offsets (gaps, beyond 2^31 and 2^32 apart), with encodings
// growing past their room and shrinking, holes reused and the arena
// compacted; with keys in the arena or read from the encodings, merges of
// values, of decodings or of encodings.
func TestWindowMatchesMapReference(t *testing.T) {
	t.Parallel()
	mergers := []Merger[kv]{catValueKV{}, catKV{}, catKeyedKV{}, catMergedKV{}}
	for mi, m := range mergers {
		t.Run(fmt.Sprintf("%T", m), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(mi), 11))
			var keys atomic.Int64
			mem := &heldBytes{b: NewBudget(1 << 40)}
			win := newWindow(m, &keys, mem)
			pool := []string{"", "a", "aa", "aaa", "ab", "a|", strings.Repeat("k", 200),
				strings.Repeat("k", 201), strings.Repeat("L", 5000), strings.Repeat("H", arenaChunk+10)}
			if win.enc != nil {
				for _, p := range collidingKeys(win.idx.seed, 6) {
					pool = append(pool, p[0], p[1])
				}
			}
			for i := range 3000 {
				pool = append(pool, fmt.Sprintf("key%d", i))
			}
			value := func() string {
				switch r := rng.IntN(20); {
				case r == 0:
					return "=" // shrink to empty
				case r < 3:
					return "=" + strings.Repeat("s", rng.IntN(100))
				case r == 3:
					return strings.Repeat("b", 2000+rng.IntN(3000))
				default:
					return strings.Repeat(string(rune('a'+rng.IntN(26))), 1+rng.IntN(40))
				}
			}
			off := int64(rng.IntN(1000))
			for round := range 6 {
				ref := &windowRef{m: m, vals: map[string]kv{}, behind: map[string]map[int64]bool{}}
				for range 60 {
					var offs []int64
					var outs [][]kv
					for range 1 + rng.IntN(200) {
						switch r := rng.IntN(100); {
						case r < 3:
							off += 1 << 31
						case r < 4:
							off += 1<<32 + 7
						case r < 15:
							off += 1 + int64(rng.IntN(5))
						default:
							off++
						}
						var os []kv
						for range rng.IntN(4) { // 0–3 outputs, of one key or several
							k := pool[rng.IntN(len(pool))]
							if rng.IntN(3) == 0 {
								k = pool[rng.IntN(16)]
							}
							os = append(os, kv{k, value()})
						}
						offs = append(offs, off)
						outs = append(outs, os)
						for _, o := range os {
							ref.add(off, o)
						}
					}
					if len(offs) == 0 {
						continue
					}
					addKV(t, win, offs, outs)
					checkWindow(t, win, ref, mem)
				}
				t.Logf("round %d: %d keys, %d merged, %d records, %d arena bytes, %d dead", round, win.keys(), win.merged, win.records, win.arenaBytes, win.dead)
				win.reset()
				if mem.windows.Load() != 0 || keys.Load() != 0 {
					t.Fatalf("after reset: %d bytes and %d keys counted", mem.windows.Load(), keys.Load())
				}
			}
		})
	}
}

// A window written in parts, in any order of the parts, frees each arena
// chunk only once all of its outputs are written: the outputs of parts
// not yet written still decode to their merged values, and once all are
// written the window counts no arena bytes.
func TestWindowPartsFreeOnlyWrittenChunks(t *testing.T) {
	t.Parallel()
	for _, m := range []Merger[kv]{catKV{}, catKeyedKV{}} {
		rng := rand.New(rand.NewPCG(7, 8))
		var keys atomic.Int64
		mem := &heldBytes{b: NewBudget(1 << 40)}
		win := newWindow(m, &keys, mem)
		ref := &windowRef{m: m, vals: map[string]kv{}, behind: map[string]map[int64]bool{}}
		off := int64(0)
		for range 40 {
			var offs []int64
			var outs [][]kv
			for range 300 {
				o := kv{fmt.Sprintf("k%d", rng.IntN(4000)), strings.Repeat("v", rng.IntN(300))}
				offs, outs = append(offs, off), append(outs, []kv{o})
				ref.add(off, o)
				off++
			}
			addKV(t, win, offs, outs)
		}
		checkWindow(t, win, ref, mem)
		win.countParts()
		var parts [][2]int
		for from := 0; from < win.keys(); {
			to, _ := win.partEnd(from, 1<<14)
			parts = append(parts, [2]int{from, to})
			from = to
		}
		rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
		done := make([]bool, win.keys())
		for _, p := range parts {
			for i := range win.keys() {
				if done[i] {
					continue
				}
				o, err := win.decode(i)
				if err != nil || o != ref.vals[ref.order[i]] {
					t.Fatalf("%T: output %d before its part was written: %q, %v", m, i, o.K, err)
				}
			}
			win.written(p[0], p[1])
			for i := p[0]; i < p[1]; i++ {
				done[win.partOutput(i)] = true
			}
		}
		if win.arenaBytes != 0 || win.size != win.metaBytes() || mem.windows.Load() != win.size {
			t.Errorf("%T: after every part: arena %d, size %d (meta %d), budget %d", m, win.arenaBytes, win.size, win.metaBytes(), mem.windows.Load())
		}
		win.reset()
	}
}
