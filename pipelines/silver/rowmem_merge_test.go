package silver

import (
	"sync"
	"testing"
)

// The rows Decode gives keep their values while other goroutines decode
// rows and merge rows into encodings (AppendMerged) with the same router,
// as a window's workers do: AppendMerged's pooled scratch, cleared after
// each merge, is none of a decoded row's memory, and neither row refers
// to the encodings, which are overwritten after use. Each kept row equals,
// once every goroutine is done, the row decoded from a private copy of its
// encoding.
func TestDecodedRowsKeepTheirMemoryAcrossMerges(t *testing.T) {
	t.Parallel()
	var rt router
	const workers = 4
	got := make([][]keptRow, workers)
	var wg sync.WaitGroup
	for w := range workers {
		rows := corpusRows(t, int64(40+w), 1500, 200)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 1<<16)
			var prev []byte
			for _, row := range rows {
				buf = rt.AppendEncoded(buf[:0], row)
				keep := func(enc []byte) bool {
					d, err := rt.Decode(enc)
					if err != nil {
						t.Error(err)
						return false
					}
					got[w] = append(got[w], keptRow{d, append([]byte(nil), enc...)})
					return true
				}
				if !keep(buf) {
					return
				}
				if prev != nil {
					merged, err := rt.AppendMerged(nil, prev, row)
					if err != nil {
						t.Error(err)
						return
					}
					if !keep(merged) {
						return
					}
					scribble(prev)
					scribble(merged)
				}
				prev = append(prev[:0], buf...)
				scribble(buf)
			}
		}()
	}
	wg.Wait()
	if n := checkKeptRows(t, got); n < workers*2000 {
		t.Fatalf("only %d rows", n)
	}
}

// keptRow is a row a test keeps and a private copy of an encoding of what
// the row must still hold.
type keptRow struct {
	row Row
	enc []byte
}

// checkKeptRows fails the test unless every kept row (per worker) equals
// the row decoded from its encoding, and returns how many rows it checked.
func checkKeptRows(t *testing.T, got [][]keptRow) int {
	t.Helper()
	var ref router
	n := 0
	for w := range got {
		for i, k := range got[w] {
			want, err := ref.Decode(k.enc)
			if err != nil {
				t.Fatal(err)
			}
			if d := sameRow(k.row, want); d != "" {
				t.Fatalf("worker %d, row %d: %s changed since the row was made", w, i, d)
			}
			n++
		}
	}
	return n
}

// scribble overwrites b, as a window reusing its memory would.
func scribble(b []byte) {
	for i := range b {
		b[i] = 0xa5
	}
}
