package silver

import (
	"slices"
	"sync"
)

// rowMemory hands out the memory of the validator's rows from chunks of
// many rows: a row's struct (taOut, saOut), its string arrays and the
// bytes of its strings are carved from the current chunk of each kind
// instead of being allocated one by one, so that a valid record costs no
// allocation of its own but a share of a chunk's. A row keeps its chunks
// alive while it is referenced; the stage's rows live until their batch
// is written or a window has encoded them, so the chunks are small (tens
// of rows) and die with their batch.
//
// A rowMemory serves one transform at a time (the Validator keeps them in
// a sync.Pool: its stage runs on every partition's worker at once). Memory
// once carved is never handed out again, and a row's memory is written
// only while the row is built, so rows outlive the rowMemory and do not
// see other rows' writes.
type rowMemory struct {
	ta   []taOut  // ta[0] is the row being built, carved once it is valid
	sa   []saOut  // sa[0] likewise
	strs []string // string arrays
	text []byte   // bytes of strings: text[len(text):cap(text)] is free
	// views holds the arrays of a row decoded as views (router.AppendMerged),
	// reused by the next one.
	views []string
}

// Chunk sizes: rows per chunk of taOut (248 bytes) and saOut (344 bytes),
// strings per chunk of arrays, bytes per chunk of text (about 40 sa rows
// of the benchmark corpus). A string or an array larger than a quarter of
// a chunk has an allocation of its own.
const (
	rowChunk  = 32
	strsChunk = 64
	textChunk = 16 << 10
)

// newTA returns a zeroed taOut for the row being built; keepTA carves it
// once the row is valid (a record that fails a rule leaves it for the
// next one). newSA and keepSA are the same for an sa row.
func (m *rowMemory) newTA() *taOut { return slot(&m.ta) }
func (m *rowMemory) keepTA()       { m.ta = m.ta[1:] }
func (m *rowMemory) newSA() *saOut { return slot(&m.sa) }
func (m *rowMemory) keepSA()       { m.sa = m.sa[1:] }

// slot returns the first element of *chunk, zeroed, after replacing an
// empty chunk with a new one.
func slot[T any](chunk *[]T) *T {
	if len(*chunk) == 0 {
		*chunk = make([]T, rowChunk)
	}
	var zero T
	(*chunk)[0] = zero
	return &(*chunk)[0]
}

// strings carves n empty strings (len n, cap n; not nil for n = 0).
func (m *rowMemory) strings(n int) []string {
	switch {
	case n == 0:
		return []string{} // '{}', not NULL
	case n > strsChunk/4:
		return make([]string, n)
	case len(m.strs) < n:
		m.strs = make([]string, strsChunk)
	}
	s := m.strs[:n:n]
	m.strs = m.strs[n:]
	return s
}

// bytes carves room for n bytes (len 0, cap n), to be written once.
func (m *rowMemory) bytes(n int) []byte {
	if n > textChunk/4 {
		return make([]byte, 0, n)
	}
	if cap(m.text)-len(m.text) < n {
		m.text = make([]byte, 0, textChunk)
	}
	at := len(m.text)
	m.text = m.text[:at+n]
	return m.text[at:at:(at + n)]
}

// view returns n strings of m.views (not nil for n = 0), for a row that
// does not outlive the call that decoded it: they follow the ones view
// returned since views was last emptied (a row's two arrays).
func (m *rowMemory) view(n int) []string {
	if n == 0 {
		return []string{} // '{}', not NULL
	}
	at := len(m.views)
	m.views = slices.Grow(m.views, n)[:at+n]
	return m.views[at : at+n : at+n]
}

// rowMemPool keeps the rowMemory of callers that run at once (a
// Validator's stage, a router's window methods, on every partition's
// worker). Safe for concurrent use; not to be copied after use.
type rowMemPool struct{ p sync.Pool }

// get returns a rowMemory for one call, to be put back when it is done.
func (mp *rowMemPool) get() *rowMemory {
	if m, ok := mp.p.Get().(*rowMemory); ok {
		return m
	}
	return &rowMemory{}
}

func (mp *rowMemPool) put(m *rowMemory) { mp.p.Put(m) }
