package run

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// Merger is implemented by a sink whose outputs can be coalesced by key
// before they are written: writing Merge(old, next) must leave the sink in
// the same state as writing old and then next (an upsert sink whose merge
// mirrors its SQL, for example). A runner with [WindowConfig.MaxKeys] set
// requires its sink to implement Merger. Both methods must be safe for
// concurrent use.
type Merger[T any] interface {
	// MergeKey returns the key under which outputs coalesce; outputs with
	// equal keys are merged, in partition order. It must not modify its
	// argument.
	MergeKey(T) string
	// Merge returns the output equivalent to old followed by next. The
	// window owns old (an output of the stage or of an earlier Merge, never
	// seen by anyone else), so Merge may update what old points to in place
	// and return it, saving an allocation per merge; next is discarded
	// afterwards and may be referenced by the result.
	Merge(old, next T) T
}

// WindowConfig enables coalescing windows: instead of writing every batch,
// a partition worker folds the outputs of consecutive batches into one
// output per key (see [Merger]) and writes them with one Sink.Write when the
// window closes. Under a backlog this writes each key once per window
// instead of once per batch; once the partition has caught up the window
// closes as soon as its queue is empty, so latency stays that of a batch.
//
// Offsets are marked only after the window's write (and its dead letters)
// are durable, so the at-least-once contract is unchanged: a crash
// re-delivers the window. Dead letters of the stage are held by the worker
// until the window closes and commit with its offsets (Config.DLQCommit
// DLQTransactional; their bytes count in the memory budget meanwhile), or
// are produced at the end of each batch, before the window closes
// (DLQAtLeastOnce). A window holds the merged outputs
// and the offsets of the records behind them, not the records: when the sink
// rejects a merged output (a [*stages.Rejections] item), every record that
// contributed to it is read back from its partition and dead-lettered as
// sink_rejected, or with the reason of a dead-letter error the rejection
// carries, as in the batch path (see the package documentation).
//
// On revocation and on shutdown an open window is written, not dropped:
// the worker finishes the batch it is processing (or, interrupted in a
// stage retry, keeps the records before the retried one), closes its window
// (write, dead letters, mark) and the offsets are committed before the
// partition moves or Run returns. A window whose write fails then is not
// retried: it is dropped uncommitted and redelivered to the next owner, as
// is a window still unwritten after Config.RevokeTimeout (the worker is
// cancelled). A partition lost (a fatal group error) drops its window. In
// every case the window's keys stop counting against MaxTotalKeys and its
// bytes against the memory budget, those of an abandoned worker (a sink
// ignoring its context) as soon as it is abandoned.
//
// Besides its own bounds (MaxKeys, MaxAge, MaxTotalKeys), a window is
// closed early when the runner's memory budget is full (see [Budget]): the
// outputs held by all windows and the records not yet processed count in
// it, and the fetches pause meanwhile, so a backlog larger than the budget
// is written in more, smaller windows (the largest open ones first; a
// window whose partition has more records waits for the budget rather
// than being written with few merged); each window still merges its
// records in partition order and marks offsets only after its write. A
// window whose sink implements [Encoder] holds its outputs encoded and is
// written in parts (one Sink.Write each, two at a time: the sink must
// accept concurrent Writes, as it does from different partitions) of
// about a 32nd of the budget (1–16 MiB of encodings); a part that fails
// stops the close like a failed write, and the window is redelivered
// whole.
//
// sluice_window_merged_total counts the outputs merged into an earlier
// output of their key once their window's write succeeded (with the
// outputs the sink rejected, if any, dead-lettered): the writes the windows
// saved. A window dropped unwritten counts nothing; its records
// are merged again, and counted, by the member that writes them.
type WindowConfig struct {
	// MaxKeys closes the window when it holds this many distinct keys (per
	// partition). 0 disables windows: every batch is written on its own.
	// Memory per partition is at most about MaxKeys merged outputs; the
	// memory budget bounds all windows together.
	MaxKeys int
	// MaxAge closes the window when its first record was processed this long
	// ago, bounding the delay of commits and of the rows under a backlog
	// (default 5s).
	MaxAge time.Duration
	// MaxTotalKeys bounds the keys held by the open windows of all the
	// runner's partitions together: a window whose batch brings the total
	// to MaxTotalKeys or more is closed at once. MaxKeys alone bounds memory
	// per partition, so a member that takes over many partitions under a
	// backlog (after the others died, say) would hold MaxKeys × partitions;
	// MaxTotalKeys caps that. 0 means no bound beyond MaxKeys; it has no
	// effect while MaxKeys is 0 (windows off). The gauge sluice_window_keys
	// shows the keys held.
	MaxTotalKeys int
}

// Encoder is implemented by a [Merger] whose outputs a window may hold
// encoded rather than as Go values: the window keeps the encodings in large
// buffers that hold no pointers (a few bytes per key besides the data,
// nothing for the garbage collector to mark) instead of one object graph
// per key, so a memory budget holds more keys. An output merged into is
// decoded, merged with [Merger.Merge] and encoded again; the window's
// outputs are decoded in parts of bounded size when it is written. Both
// methods must be safe for concurrent use.
type Encoder[T any] interface {
	// AppendEncoded appends the encoding of o to dst and returns the
	// extended slice.
	AppendEncoded(dst []byte, o T) []byte
	// Decode returns the output encoded in b by AppendEncoded. The result
	// must not refer to b's memory, which the window reuses. An error is a
	// fatal error of the runner.
	Decode(b []byte) (T, error)
}

// window is the state of an open coalescing window of one partition. It
// keeps few objects per key (the merged output and a map entry, or an
// entry in pointer-free buffers and an index slot) and one int32 per
// record (the output it went to) because a large window is live heap that
// every GC cycle marks. What it holds counts in the runner's memory
// budget (see [Budget]): for encoded outputs the buffers and the capacity
// of its index and slices (metaBytes), for outputs held as values the
// bytes of the record each came from plus a per-key overhead and the
// capacity of its per-record slices (recBytes).
type window[Out any] struct {
	outs       []Out    // merged outputs in order of first appearance: the write (enc == nil)
	spans      []span   // where output i's entry (key and encoding) is in arena (enc != nil)
	arena      [][]byte // entries, in chunks of arenaChunk bytes or one larger entry
	arenaBytes int64    // capacity of the arena's chunks
	dead       int64    // arena bytes in no entry's key or encoding: holes and room left
	holes      [holeClasses][]hole
	scratch    []byte           // encoding buffer of add
	byKey      map[string]int32 // index into outs (enc == nil)
	idx        keyIndex         // index into spans, keys in the arena (enc != nil)
	keyHash    uint32           // hash of the key in keyBuf, when lookup found none (enc != nil)
	recOut     []int32          // recOut[j]: the output of the window's j-th record, -1: none (see eachRecord)
	recMore    []recLink        // the other outputs of records with outputs of several keys
	gaps       []recGap         // records whose offset is not the previous one's + 1, the first among them
	nextOff    int64            // offset after the last record's
	opened     time.Time
	records    int           // records processed into the window
	merged     int           // outputs merged into an earlier one (sluice_window_merged_total once written)
	last       *kgo.Record   // last record processed (for the commit mark)
	merger     Merger[Out]   // the runner's sink
	enc        Encoder[Out]  // the sink, when it implements Encoder
	held       *atomic.Int64 // keys held by all the runner's windows (WindowConfig.MaxTotalKeys)
	mem        *heldBytes    // the runner's share of the memory budget
	size       int64         // bytes the window holds, as counted in the budget
	closing    int64         // bytes counted as being written in Budget.closing (closeWindow)
	unwritten  []int32       // per arena chunk, its outputs not yet written (closeWindow)
	parts      []int32       // the encoded outputs in the order they are written, by arena chunk (countParts)
	pool       *chunkPool    // where freed chunks of arenaChunk bytes go, and new ones come from (nil: none)
	partMu     sync.Mutex    // guards unwritten, the arena's freed chunks, size and closing while parts are written (written)

	// encMerge is the sink when it is an Encoder implementing EncodedMerger.
	encMerge EncodedMerger[Out]
	// keyApp is the sink when it implements KeyAppender; keyBuf holds the
	// key lookup built last.
	keyApp KeyAppender[Out]
	keyBuf []byte
	// encKey is the sink when it is an Encoder implementing EncodedKeyer:
	// the arena's entries then hold no key; cmpBuf holds the key read
	// from an encoding last.
	encKey EncodedKeyer
	cmpBuf []byte

	// open is size while the window is open and not being written, else
	// 0: what the runner's other workers compare their window with
	// (worker.budgetClose). Written by the worker only.
	open atomic.Int64

	// mu guards counted, countedBytes and released: release runs on the
	// runner's goroutine while the worker may still be blocked in the
	// window's write.
	mu           sync.Mutex
	counted      int64 // keys this window counts in *held
	countedBytes int64 // bytes this window counts in the budget
	released     bool  // release gave the keys back: the window no longer counts in *held
}

// span locates one output's entry in the window's arena: room bytes at
// off, the key's length, the key and n bytes of encoding (windowkeys.go).
type span struct{ chunk, off, n, room int32 }

// recLink says that record rec (its index in the window) is behind
// output g too.
type recLink struct{ rec, g int32 }

// recGap says that record rec (its index in the window) and those after
// it, up to the next gap, are at offsets off, off+1, …: the offsets of a
// window's records are consecutive but where transaction markers or
// compaction left holes.
type recGap struct {
	rec int32
	off int64
}

// Budget overheads of a window that holds outputs as values: per key (its
// map entry, slice entries and the key's string header) and per record
// (its recOut entry; the gaps and links of records count by their
// slices' capacity, recBytes). A window of encoded outputs counts its
// arena and the capacity of its index and slices instead (metaBytes).
const (
	windowKeyOverhead    = 96
	windowRecordOverhead = 4 // unsafe.Sizeof(int32(0))
	arenaChunk           = 256 << 10
)

func newWindow[Out any](m Merger[Out], held *atomic.Int64, mem *heldBytes) *window[Out] {
	win := &window[Out]{byKey: map[string]int32{}, merger: m, held: held, mem: mem}
	win.enc, _ = m.(Encoder[Out])
	if win.enc != nil {
		win.encMerge, _ = m.(EncodedMerger[Out])
		win.encKey, _ = m.(EncodedKeyer)
		win.idx.seed = maphash.MakeSeed()
	}
	win.keyApp, _ = m.(KeyAppender[Out])
	return win
}

func (win *window[Out]) empty() bool { return win.records == 0 }

// keys returns the number of distinct keys (outputs) in the window.
func (win *window[Out]) keys() int { return len(win.spans) + len(win.outs) }

// eachRecord calls fn with the offset of every record behind an output
// and that output's index, in offset order; a record behind outputs of
// several keys comes once per output (and may come twice for one).
func (win *window[Out]) eachRecord(fn func(off int64, g int32)) {
	gi, off := 0, int64(0)
	for j, g := range win.recOut {
		if gi < len(win.gaps) && win.gaps[gi].rec == int32(j) {
			off = win.gaps[gi].off
			gi++
		}
		if g >= 0 {
			fn(off, g)
		}
		for _, m := range win.moreOf(int32(j)) {
			fn(off, m.g)
		}
		off++
	}
}

// moreOf returns the recMore links of record j (recMore is in record
// order: add goes through its outputs in the order of their records).
func (win *window[Out]) moreOf(j int32) []recLink {
	lo, _ := slices.BinarySearchFunc(win.recMore, j, func(l recLink, j int32) int { return cmp.Compare(l.rec, j) })
	hi := lo
	for hi < len(win.recMore) && win.recMore[hi].rec == j {
		hi++
	}
	return win.recMore[lo:hi]
}

// addRecords appends the records of batch to recOut (no output yet) and
// gaps, and returns the index of the first.
func (win *window[Out]) addRecords(batch []*kgo.Record) int32 {
	first := int32(len(win.recOut))
	for i, rec := range batch {
		if len(win.recOut) == 0 || rec.Offset != win.nextOff {
			win.gaps = append(win.gaps, recGap{rec: first + int32(i), off: rec.Offset})
		}
		win.recOut = append(win.recOut, -1)
		win.nextOff = rec.Offset + 1
	}
	return first
}

// behind records that record j is behind output g.
func (win *window[Out]) behind(j, g int32) {
	switch o := win.recOut[j]; {
	case o < 0:
		win.recOut[j] = g
	case o != g:
		if n := len(win.recMore); n == 0 || win.recMore[n-1] != (recLink{j, g}) {
			win.recMore = append(win.recMore, recLink{j, g})
		}
	}
}

// add folds the outputs of batch into the window (counting in win.merged
// those merged into an earlier output) and returns the keys held by all
// the runner's windows afterwards. Its error (an encoding the sink's
// Encoder cannot decode) is fatal.
func (win *window[Out]) add(batch []*kgo.Record, p *pending[Out]) (held int64, err error) {
	if win.records == 0 {
		win.opened = time.Now()
	}
	added := int64(0) // new keys
	size0 := win.size
	recBytes0 := win.recBytes()
	if win.records == 0 {
		recBytes0 = 0 // a new window counts the slices its reset kept
	}
	rec0 := win.addRecords(batch)
	for i, o := range p.outs {
		rec := batch[p.owners[i]]
		j := rec0 + int32(p.owners[i])
		g, ok, k, err := win.lookup(o)
		if err != nil {
			return win.held.Load(), err
		}
		if ok {
			if err := win.merge(g, o); err != nil {
				return win.held.Load(), err
			}
			win.behind(j, g)
			win.merged++
			continue
		}
		added++
		g = int32(win.keys())
		if win.enc != nil {
			win.idx.insert(win.keyHash, g)
			win.store(-1, o)
		} else {
			if win.keyApp != nil {
				k = string(win.keyBuf) // a new key: its only copy
			}
			win.byKey[k] = g
			win.outs = append(win.outs, o)
			win.size += recordBytes(rec) + windowKeyOverhead + int64(len(k))
		}
		win.behind(j, g)
	}
	win.records += len(batch)
	win.last = batch[len(batch)-1]
	if win.enc != nil {
		win.compact()
		win.size = win.arenaBytes + win.metaBytes()
	} else {
		win.size += win.recBytes() - recBytes0
	}
	win.open.Store(win.size)
	win.mu.Lock()
	defer win.mu.Unlock()
	if win.released {
		return win.held.Load(), nil
	}
	win.counted += added
	win.countedBytes += win.size - size0
	win.mem.addWindows(win.size - size0)
	return win.held.Add(added), nil
}

// lookup returns the index of o's output when its key is in the window.
// When the sink is a KeyAppender the key is built in win.keyBuf (and k is
// ""): the lookup does not allocate, and add copies the key only when it
// is new; else k is MergeKey(o). An encoded window looks the key up in
// its index, with the key in win.keyBuf and, when it is new, its hash in
// win.keyHash (for add's insert); its error is one of the sink's
// EncodedKeyer.
func (win *window[Out]) lookup(o Out) (g int32, ok bool, k string, err error) {
	if win.keyApp != nil {
		win.keyBuf = win.keyApp.AppendMergeKey(win.keyBuf[:0], o)
	} else {
		k = win.merger.MergeKey(o)
		if win.enc != nil {
			win.keyBuf = append(win.keyBuf[:0], k...)
		}
	}
	if win.enc != nil {
		win.keyHash = win.idx.hashKey(win.keyBuf)
		g, ok, err = win.find(win.keyBuf, win.keyHash)
		return g, ok, "", err
	}
	if win.keyApp != nil {
		g, ok = win.byKey[string(win.keyBuf)]
		return g, ok, "", nil
	}
	g, ok = win.byKey[k]
	return g, ok, k, nil
}

// merge merges o into output g.
func (win *window[Out]) merge(g int32, o Out) error {
	if win.enc == nil {
		win.outs[g] = win.merger.Merge(win.outs[g], o)
		return nil
	}
	if win.encMerge != nil {
		b, err := win.encMerge.AppendMerged(win.scratch[:0], win.encoded(int(g)), o)
		if err != nil {
			return fmt.Errorf("window: merge into an output encoded by %T: %w", win.enc, err)
		}
		win.scratch = b
		win.place(g)
		return nil
	}
	old, err := win.decode(int(g))
	if err != nil {
		return err
	}
	win.store(g, win.merger.Merge(old, o))
	return nil
}

func (win *window[Out]) decode(i int) (Out, error) {
	out, err := win.enc.Decode(win.encoded(i))
	if err != nil {
		var zero Out
		return zero, fmt.Errorf("window: decode the output of %T's Encoder: %w", win.enc, err)
	}
	return out, nil
}

// store encodes o as output g (-1: a new output) in the arena (place).
func (win *window[Out]) store(g int32, o Out) {
	win.scratch = win.enc.AppendEncoded(win.scratch[:0], o)
	win.place(g)
}

// place stores the encoding in win.scratch as output g (-1: a new
// output, whose key is in win.keyBuf) in the arena: in place when it fits
// the entry's room, else in a new entry (see alloc), the old one a hole.
func (win *window[Out]) place(g int32) {
	n := len(win.scratch)
	if g >= 0 {
		s := &win.spans[g]
		e := win.arena[s.chunk][s.off : s.off+s.room]
		_, at := entryKey(e)
		if at+n <= int(s.room) {
			copy(e[at:], win.scratch)
			win.dead += int64(s.n) - int64(n)
			s.n = int32(n)
			return
		}
		ns := win.alloc(at + n)
		ne := win.arena[ns.chunk][ns.off : ns.off+ns.room]
		copy(ne, e[:at])
		copy(ne[at:], win.scratch)
		win.dead += int64(at) + int64(s.n) // the old entry's bytes; its room beyond them was counted already
		win.free(*s)
		ns.n = int32(n)
		*s = ns
		return
	}
	key := win.keyBuf
	if win.encKey != nil {
		key = nil // read from the encoding
	}
	at := uvarintLen(len(key)) + len(key)
	ns := win.alloc(at + n)
	e := win.arena[ns.chunk][ns.off : ns.off+ns.room]
	w := binary.PutUvarint(e, uint64(len(key)))
	copy(e[w:], key)
	copy(e[at:], win.scratch)
	ns.n = int32(n)
	win.spans = append(win.spans, ns)
}

// uvarintLen returns the length of x's uvarint encoding.
func uvarintLen(x int) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// compact copies the live entries into a new arena once dead bytes take
// 1/compactShare of it, and at least arenaChunk (bench-silver's sa rows,
// whose text changes length from one scrape to the next, left a fifth of
// the arena dead on average with a threshold of a half, before holes were
// reused). The entries are copied chunk by chunk, in arena order, and
// each old chunk of arenaChunk bytes, once its entries are copied, takes
// the next ones (compactInto): a compaction allocates a chunk or two
// instead of a whole new arena.
func (win *window[Out]) compact() {
	if win.dead < arenaChunk || compactShare*win.dead < win.arenaBytes {
		return
	}
	old := win.arena
	order, starts := win.byChunk()
	win.arena, win.dead = make([][]byte, 0, len(old)), 0
	win.clearHoles()
	var spare [][]byte // old chunks whose entries are all copied
	for c, chunk := range old {
		for _, i := range order[starts[c]:starts[c+1]] {
			s := win.spans[i]
			e := chunk[s.off : s.off+s.room]
			_, at := entryKey(e)
			used := at + int(s.n)
			var ns span
			ns, spare = win.compactInto(used, spare)
			copy(win.arena[ns.chunk][ns.off:], e[:used])
			ns.n = s.n
			win.spans[i] = ns
		}
		old[c] = nil
		win.size -= int64(cap(chunk))
		win.arenaBytes -= int64(cap(chunk))
		if cap(chunk) == arenaChunk {
			spare = append(spare, chunk[:0])
		}
	}
	for _, chunk := range spare {
		win.pool.put(chunk)
	}
}

// compactInto is alloc for compact: the end of the arena, whose next chunk
// is an old one from spare when there is one (its bytes count again in
// win.size and win.arenaBytes), else a new one. It returns spare without
// the chunk taken.
func (win *window[Out]) compactInto(need int, spare [][]byte) (span, [][]byte) {
	last := len(win.arena) - 1
	if need <= arenaChunk && len(spare) > 0 && (last < 0 || cap(win.arena[last])-len(win.arena[last]) < need) {
		win.arena = append(win.arena, spare[len(spare)-1])
		spare[len(spare)-1] = nil
		spare = spare[:len(spare)-1]
		win.size += arenaChunk
		win.arenaBytes += arenaChunk
	}
	return win.alloc(need), spare
}

// byChunk returns the indexes of the outputs (encoded window) ordered by
// arena chunk, those of chunk c at order[starts[c]:starts[c+1]], each
// chunk's in output order.
func (win *window[Out]) byChunk() (order, starts []int32) {
	starts = make([]int32, len(win.arena)+1)
	for _, s := range win.spans {
		starts[s.chunk+1]++
	}
	for c := 1; c < len(starts); c++ {
		starts[c] += starts[c-1]
	}
	order = make([]int32, len(win.spans))
	next := slices.Clone(starts[:len(starts)-1])
	for i, s := range win.spans {
		order[next[s.chunk]] = int32(i)
		next[s.chunk]++
	}
	return order, starts
}

// countParts orders, before the window is written, its encoded outputs
// by arena chunk (win.parts: the parts are runs of it, so that each frees
// its chunks as it is written; compact keeps the arena's order, not the
// outputs') and counts the outputs of each chunk (see written).
func (win *window[Out]) countParts() {
	if win.enc == nil {
		return
	}
	order, starts := win.byChunk()
	win.parts = order
	win.unwritten = slices.Grow(win.unwritten[:0], len(win.arena))[:len(win.arena)]
	for c := range win.unwritten {
		win.unwritten[c] = starts[c+1] - starts[c]
	}
}

// partOutput returns the index of the output at position i of the
// window's write: of win.parts once countParts ordered an encoded
// window's outputs, else i (outputs held as values are written in order).
func (win *window[Out]) partOutput(i int) int32 {
	if win.parts == nil {
		return int32(i)
	}
	return win.parts[i]
}

// written frees the arena chunks whose outputs are all written once the
// outputs at positions from..to of win.parts are (to win.pool), gives
// their bytes back to the budget, and returns them: a window written in
// parts releases its memory part by part, so that the runner polls again
// before the whole window is written.
func (win *window[Out]) written(from, to int) (freed int64) {
	win.partMu.Lock()
	defer win.partMu.Unlock()
	for i := from; i < to; i++ {
		c := win.spans[win.parts[i]].chunk
		if win.unwritten[c]--; win.unwritten[c] == 0 {
			freed += int64(cap(win.arena[c]))
			win.pool.put(win.arena[c]) // no output is read from it again
			win.arena[c] = nil
		}
	}
	win.size -= freed
	win.arenaBytes -= freed
	win.closing -= freed
	win.mu.Lock()
	defer win.mu.Unlock()
	if !win.released {
		win.countedBytes -= freed
		win.mem.addWindows(-freed)
	}
	return freed
}

// partEnd returns the position (in win.parts) after the last encoded
// output of the part that starts at from and holds about maxBytes (at
// least one output), and its encoded bytes.
func (win *window[Out]) partEnd(from int, maxBytes int64) (to int, size int64) {
	to = from
	for to < len(win.parts) && (to == from || size+int64(win.spans[win.parts[to]].n) <= maxBytes) {
		size += int64(win.spans[win.parts[to]].n)
		to++
	}
	return to, size
}

// reset empties the window (after its write, or to drop it when the
// partition is lost: its records are then redelivered to the new owner).
func (win *window[Out]) reset() {
	win.mu.Lock()
	if !win.released {
		win.held.Add(-win.counted)
		win.mem.addWindows(-win.countedBytes)
	}
	win.counted, win.countedBytes = 0, 0
	win.mu.Unlock()
	clear(win.outs)
	win.outs = win.outs[:0]
	win.spans, win.arena, win.arenaBytes, win.dead, win.size = shrink(win.spans), nil, 0, 0, 0
	win.parts = nil
	win.clearHoles()
	clear(win.byKey)
	win.idx.reset()
	win.recOut, win.recMore, win.gaps = shrink(win.recOut), shrink(win.recMore), shrink(win.gaps)
	win.records, win.merged, win.last = 0, 0, nil
	win.open.Store(0)
}

// shrink empties s for the next window, dropping a large array: what a
// worker keeps between windows is outside the budget.
func shrink[T any](s []T) []T {
	if cap(s) > keepBetweenWindows {
		return nil
	}
	return s[:0]
}

// keepBetweenWindows bounds the entries of the slices a window keeps for
// the next one.
const keepBetweenWindows = 4096

// release gives the window's keys and bytes back to the runner's bounds for
// good (WindowConfig.MaxTotalKeys, the gauge sluice_window_keys, the memory
// budget): the worker was abandoned, blocked in a sink or stage that
// ignores its context, and may never return to reset its window. Safe to
// call while the worker runs.
func (win *window[Out]) release() {
	win.mu.Lock()
	defer win.mu.Unlock()
	if !win.released {
		win.held.Add(-win.counted)
		win.mem.addWindows(-win.countedBytes)
		win.counted, win.countedBytes, win.released = 0, 0, true
	}
}

// handleWindowed processes batch into the window and closes the window when
// it is full, old, or the partition has caught up, or when the memory
// budget is full (see [Budget]).
func (w *worker[In, Out]) handleWindowed(batch []*kgo.Record) error {
	r := w.r
	// A window's records are indexed with 32 bits (recOut): a window of
	// 2 billion records goes on in a new one.
	if len(w.win.recOut) > math.MaxInt32-len(batch) {
		if err := w.closeWindow(); err != nil {
			return err
		}
	}
	batch, p, done, stopErr := w.process(batch) // not grown: windows keep their batches
	defer p.reset()
	// A worker asked to stop (errAbandoned without a cancel: revocation or
	// shutdown, during a stage retry) keeps the records it did and closes
	// the window below, as the batch path flushes the done part of its
	// batch; a cancelled one drops the window (redelivered).
	if errors.Is(stopErr, errAbandoned) && w.ctx.Err() != nil {
		return errAbandoned
	}
	if len(p.dlq) > 0 {
		if err := w.produceDLQ(p); err != nil {
			return err
		}
	}
	held := w.win.held.Load()
	if done > 0 {
		var err error
		if held, err = w.win.add(batch[:done], p); err != nil {
			return stages.Fatal(err)
		}
	}
	// The batch's records are processed: what they hold now is in the
	// window. So are its outputs and dead letters: p lets go of them
	// before the window may be written (they would stay referenced,
	// outside the budget, until the write ended).
	p.reset()
	w.releaseRecords(recordsBytes(batch))
	overTotal := r.cfg.Window.MaxTotalKeys > 0 && held >= int64(r.cfg.Window.MaxTotalKeys)
	bounded := stopErr != nil || w.win.keys() >= r.cfg.Window.MaxKeys || overTotal ||
		time.Since(w.win.opened) >= r.cfg.Window.MaxAge
	if !bounded && w.budgetClose(false) {
		bounded = true
	}
	if bounded || !w.moreSoon() {
		if err := w.closeWindow(); err != nil {
			return err
		}
	}
	return stopErr
}

// moreSoon reports whether the window should stay open for more records:
// records are queued, or arrive within BatchLinger, or — while the
// partition is known to have records beyond the window (its high watermark,
// from the last fetch) — arrive within backlogWait (and before the window's
// MaxAge). While the memory budget is full (fetches stopped: the queue is
// empty because of the budget, not because the partition caught up) such
// a window waits for the budget up to its MaxAge instead of closing after
// backlogWait: closing it would write a window that merged few records
// and free little, as other windows are being written. Under budget
// pressure it returns false when this window is one to close (see
// budgetClose). It returns false when the worker is asked to stop.
func (w *worker[In, Out]) moreSoon() bool {
	if w.queued() > 0 {
		return true
	}
	wait := w.r.cfg.BatchLinger
	last := w.win.last
	backlog := last != nil && last.Offset+1 < w.hwm.Load()
	if backlog {
		wait = max(wait, min(backlogWait, time.Until(w.win.opened.Add(w.r.cfg.Window.MaxAge))))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	waited := false // backlogWait passed with the budget full
	for {
		changed := w.r.budget.wait()
		if w.budgetClose(waited) {
			return false // write the window now
		}
		select {
		case <-w.wake:
			if w.queued() > 0 {
				return true
			}
		case <-changed:
		case <-t.C:
			if w.queued() > 0 {
				return true
			}
			left := time.Until(w.win.opened.Add(w.r.cfg.Window.MaxAge))
			if !backlog || waited || w.r.budget.pollable() || left <= 0 {
				return false
			}
			waited = true
			t.Reset(left)
		case <-w.stopping:
			return false
		case <-w.ctx.Done():
			return false
		}
	}
}

// budgetClose reports whether w's open window is to be closed early for
// the memory budget (counted in sluice_window_budget_closes_total): the
// budget is under pressure (see Budget) and the window holds at least half
// the bytes of the runner's largest window not being written, or force.
// The largest windows go first: they free the most and merged the most
// records, where a window just opened would be written having merged
// next to nothing (its keys written again by its next window). force is
// the fallback of a worker that waited for the larger windows' workers
// (busy in a batch or a retry) for backlogWait.
func (w *worker[In, Out]) budgetClose(force bool) bool {
	r := w.r
	if !r.budget.pressure() {
		return false
	}
	if !force && 2*w.win.open.Load() < r.largestOpenWindow() {
		return false
	}
	r.budgetCloses.Inc()
	return true
}

// largestOpenWindow returns the bytes of the runner's largest window that
// is open and not being written.
func (r *Runner[In, Out]) largestOpenWindow() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := int64(0)
	for _, w := range r.workers {
		if w.win != nil {
			m = max(m, w.win.open.Load())
		}
	}
	return m
}

// backlogWait bounds how long a window waits for the next fetch of a
// partition whose high watermark shows more records (less when the memory
// budget fills up meanwhile: the window is written at once). It is a bound, not a
// delay: under a backlog the next fetch is usually there at once. Offsets
// that hold no record for the consumer (transaction markers, compacted
// records) also stay below the high watermark; they cost at most this wait.
const backlogWait = time.Second

// closeWindow writes the window's merged outputs, dead-letters the records
// behind rejected outputs, and marks the window's last offset for commit.
// The outputs are written in parts of about windowWriteBytes (one Write
// each; a window of few outputs is one Write), so that decoding them and
// the sink's buffers stay bounded; a part that fails stops the close, and
// the window is redelivered whole, the parts already written rewritten. The
// window's merges count in sluice_window_merged_total once its write
// succeeded (rejected outputs included: they were merged and handed to the
// sink); a window whose write fails for good or is abandoned is dropped
// uncounted, and the member that gets its records again counts their
// merges when it writes them. While it is written, the window's bytes count
// as free for the budget's choice of windows to close (not for polling).
func (w *worker[In, Out]) closeWindow() error {
	r, win := w.r, w.win
	if win.empty() {
		return nil
	}
	win.open.Store(0)
	if win.keys() > 0 {
		win.closing = win.size
		r.budget.addClosing(win.closing)
		defer func() { r.budget.addClosing(-win.closing); win.closing = 0 }()
		if err := w.writeParts(); err != nil {
			return err
		}
		r.m.merged.Add(float64(win.merged))
	}
	// State stores: the window's changelog records, after its write, before
	// its offsets (changelog.go).
	if err := w.flushState(); err != nil {
		return err
	}
	if w.lost.Load() {
		return errAbandoned
	}
	if err := w.markDone(win.last, win.records); err != nil {
		return err
	}
	win.reset()
	return nil
}

// writeParts writes the window's outputs: with one Write when they are
// values, else in parts of about Budget.windowPartBytes of encodings,
// up to partWriters of them at once (the parts hold distinct keys, so
// their order does not matter), each waiting its turn in the budget
// (Budget.acquireWrite) and giving its arena chunks back once written
// (window.written). No part starts after one failed; the first failure
// is returned once the parts under way have ended.
func (w *worker[In, Out]) writeParts() error {
	r, win := w.r, w.win
	if win.enc == nil {
		return w.write(win.outs, func(rej *stages.Rejections, attempt int) error {
			return w.deadLetterRejected(rej, attempt, 0, len(win.outs))
		})
	}
	win.countParts()
	size := r.budget.windowPartBytes()
	// The parts' writes set and restore w.blocked concurrently: restore
	// the value before them once they all ended.
	defer w.blocked.Store(w.blocked.Load())
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // guards first
		first error
		rejMu sync.Mutex // one part's rejections at a time (deadLetterRejected)
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	slots := make(chan struct{}, partWriters)
	for from := 0; from < win.keys() && !failed(); {
		to, n := win.partEnd(from, size)
		slots <- struct{}{}
		if failed() {
			break
		}
		part := from
		wg.Go(func() {
			defer func() { <-slots }()
			if err := w.writePart(part, to, n, &rejMu); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
		from = to
	}
	wg.Wait()
	return first
}

// partWriters is how many parts of one window are written at once: a
// sink such as PostgreSQL then works on one part while the other is
// decoded and sent, and the database's cores are used by more than one
// statement. Budget.acquireWrite still bounds the parts being written
// across the process.
const partWriters = 2

// writePart decodes and writes the window's encoded outputs at positions
// from..to of win.parts (n bytes of encodings) with one Write, then frees
// the arena chunks that held only written outputs. Safe for concurrent
// use on distinct parts; rejMu serialises the dead-lettering of
// rejections.
func (w *worker[In, Out]) writePart(from, to int, n int64, rejMu *sync.Mutex) error {
	r, win := w.r, w.win
	if err := r.budget.acquireWrite(w.ctx, n); err != nil {
		return errAbandoned
	}
	defer r.budget.releaseWrite(n)
	outs := make([]Out, 0, to-from)
	for i := from; i < to; i++ {
		o, err := win.decode(int(win.parts[i]))
		if err != nil {
			return stages.Fatal(err)
		}
		outs = append(outs, o)
	}
	err := w.write(outs, func(rej *stages.Rejections, attempt int) error {
		rejMu.Lock()
		defer rejMu.Unlock()
		return w.deadLetterRejected(rej, attempt, from, len(outs))
	})
	if err != nil {
		return err
	}
	r.budget.addClosing(-win.written(from, to))
	return nil
}

// deadLetterRejected reads back the records behind the rejected outputs and
// produces them to the DLQ, classified by sinkRejection (sink_rejected
// unless the rejection's error is a dead letter with its own reason). The
// rejection's indexes are into a Write of n outputs, the window's outputs
// from position base of its write on (partOutput).
func (w *worker[In, Out]) deadLetterRejected(rej *stages.Rejections, attempt, base, n int) error {
	r, win := w.r, w.win
	type reason struct {
		rule string
		err  error
		item int
	}
	// The first rejection of each window output, and its place among
	// the items: a record behind several rejected outputs takes the
	// reason of the first item among them, as the items come.
	byOut := map[int32]reason{}
	for i, it := range rej.Items {
		if it.Index < 0 || it.Index >= n {
			return fmt.Errorf("%w: item %d of a %d-item batch", errInvalidRejection, it.Index, n)
		}
		g := win.partOutput(base + it.Index)
		if _, ok := byOut[g]; !ok {
			byOut[g] = reason{it.Rule, it.Err, i}
		}
	}
	why := map[int64]reason{}
	var offsets []int64 // ascending: eachRecord goes in offset order
	win.eachRecord(func(off int64, g int32) {
		y, ok := byOut[g]
		if !ok {
			return
		}
		if prev, seen := why[off]; !seen || y.item < prev.item {
			if !seen {
				offsets = append(offsets, off)
			}
			why[off] = y
		}
	})
	recs, gone, err := r.readBack(w.ctx, w.tp, offsets)
	if err != nil {
		return fmt.Errorf("read back rejected records: %w", err)
	}
	var p pending[Out]
	for i, rec := range recs {
		y := why[rec.Offset]
		p.addDLQ(i, w.dlqRecord(rec, sinkRejection(y.rule, y.err), attempt, r.cfg.Name+"/sink"))
	}
	// A record no longer in the partition (retention, DeleteRecords or
	// compaction removed it while the window was open) is dead-lettered as
	// a stub with its coordinates, so the rejection is not retried for ever.
	for i, off := range gone {
		y := why[off]
		src := &kgo.Record{Topic: w.tp.topic, Partition: w.tp.partition, Offset: off}
		d := w.dlqRecord(src, sinkRejection(y.rule, y.err), attempt, r.cfg.Name+"/sink")
		d.rec.Headers = append(d.rec.Headers, kgo.RecordHeader{Key: stages.HeaderValueOmitted,
			Value: []byte("the record was no longer in its partition (retention, DeleteRecords or compaction) when the sink rejected its merged output")})
		p.addDLQ(len(recs)+i, d)
	}
	return w.produceDLQ(&p)
}

// readBack fetches the records at offsets (ascending) of one partition with
// a short-lived client outside the group. gone lists the offsets the
// partition no longer holds (the first record it returns is past them).
func (r *Runner[In, Out]) readBack(ctx context.Context, p tp, offsets []int64) (recs []*kgo.Record, gone []int64, err error) {
	if len(offsets) == 0 {
		return nil, nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, readBackTimeout)
	defer cancel()
	// Offsets below the partition's start were deleted (retention,
	// DeleteRecords); reading from them would reset to the start and, when
	// nothing follows, wait for records that never come.
	start, err := r.startOffset(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	want := offsets
	for len(want) > 0 && want[0] < start {
		gone = append(gone, want[0])
		want = want[1:]
	}
	if len(want) == 0 {
		return nil, gone, nil
	}
	opts := append(slices.Clone(r.o.kopts), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		p.topic: {p.partition: kgo.NewOffset().At(want[0])},
	}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	out := make([]*kgo.Record, 0, len(want))
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("%s/%d: %d record(s) from offset %d not read: %w", p.topic, p.partition, len(want), want[0], err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, nil, fmt.Errorf("%s/%d: %w", p.topic, p.partition, ferr)
		}
		for _, rec := range fs.Records() {
			for len(want) > 0 && want[0] < rec.Offset {
				gone = append(gone, want[0])
				want = want[1:]
			}
			if len(want) > 0 && want[0] == rec.Offset {
				out = append(out, rec)
				want = want[1:]
			}
		}
	}
	return out, gone, nil
}

// startOffset returns the first offset partition p still holds.
func (r *Runner[In, Out]) startOffset(ctx context.Context, p tp) (int64, error) {
	cl, err := kgo.NewClient(r.o.kopts...)
	if err != nil {
		return 0, fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, p.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("%s/%d: start offset: %w", p.topic, p.partition, err)
	}
	o, ok := starts.Lookup(p.topic, p.partition)
	if !ok {
		return 0, fmt.Errorf("%s/%d: no start offset listed", p.topic, p.partition)
	}
	return o.Offset, nil
}

// readBackTimeout bounds one read-back of rejected records.
const readBackTimeout = 30 * time.Second
