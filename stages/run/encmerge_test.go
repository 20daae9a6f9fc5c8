package run

import (
	"bytes"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kvAppendMerger is a kvMerger whose merge happens on the encoding: it
// appends next's value to old's ("key\x00v1,v2,…"), which Merge, never
// called by a window that uses AppendMerged, would not do.
type kvAppendMerger struct {
	kvMerger
	merges *atomic.Int64
}

func (kvAppendMerger) Merge(_, next kv) kv { panic("Merge called: the window should use AppendMerged") }

func (m kvAppendMerger) AppendMerged(dst, old []byte, next kv) ([]byte, error) {
	if !bytes.HasPrefix(old, []byte(next.K+"\x00")) {
		return dst, fmt.Errorf("old %q is not an encoding of key %q", old, next.K)
	}
	m.merges.Add(1)
	return append(append(append(dst, old...), ','), next.V...), nil
}

// A window whose sink implements EncodedMerger merges an output into the
// encoding it holds with AppendMerged (not Decode, Merge and
// AppendEncoded), in partition order, and its outputs decode to what
// AppendMerged produced, including encodings that grew out of their slot.
func TestWindowMergesEncodedOutputsWithAppendMerged(t *testing.T) {
	t.Parallel()
	var keys, merges atomic.Int64
	mem := &heldBytes{b: NewBudget(1 << 30)}
	win := newWindow[kv](kvAppendMerger{merges: &merges}, &keys, mem)
	if win.encMerge == nil {
		t.Fatal("the window does not use the sink's EncodedMerger")
	}
	want := map[string]string{}
	off := int64(0)
	for b := range 20 {
		batch := make([]*kgo.Record, 10)
		p := &pending[kv]{}
		for i := range batch {
			k := fmt.Sprintf("k%d", (b*10+i)%7)
			v := fmt.Sprintf("v%d", off)
			batch[i] = &kgo.Record{Offset: off}
			off++
			p.outs = append(p.outs, kv{k, v})
			p.owners = append(p.owners, i)
			if old, ok := want[k]; ok {
				want[k] = old + "," + v
			} else {
				want[k] = v
			}
		}
		if _, err := win.add(batch, p); err != nil {
			t.Fatal(err)
		}
	}
	if got := merges.Load(); got != 200-7 {
		t.Errorf("AppendMerged called %d times, want %d", got, 200-7)
	}
	if got := windowValues(t, win); !maps.Equal(got, want) {
		t.Errorf("the window holds %q, want %q", got, want)
	}
}

// kvKeyAppender is a kvMerger that appends its keys.
type kvKeyAppender struct{ kvMerger }

func (kvKeyAppender) MergeKey(kv) string {
	panic("MergeKey called: the window should use AppendMergeKey")
}

func (kvKeyAppender) AppendMergeKey(dst []byte, o kv) []byte { return append(dst, o.K...) }

// A window whose sink implements KeyAppender finds and merges outputs by
// the keys AppendMergeKey appends (MergeKey is not called) and counts the
// new keys.
func TestWindowLooksUpKeysWithAppendMergeKey(t *testing.T) {
	t.Parallel()
	var keys atomic.Int64
	mem := &heldBytes{b: NewBudget(1 << 30)}
	win := newWindow[kv](kvKeyAppender{}, &keys, mem)
	want := map[string]string{}
	for b := range 5 {
		batch := make([]*kgo.Record, 8)
		p := &pending[kv]{}
		for i := range batch {
			o := kv{fmt.Sprintf("k%d", (b*8+i)%5), fmt.Sprint(b*8 + i)}
			batch[i] = &kgo.Record{Offset: int64(b*8 + i)}
			p.outs = append(p.outs, o)
			p.owners = append(p.owners, i)
			want[o.K] = o.V
		}
		if _, err := win.add(batch, p); err != nil {
			t.Fatal(err)
		}
	}
	if got := windowValues(t, win); !maps.Equal(got, want) {
		t.Errorf("the window holds %q, want %q", got, want)
	}
	if keys.Load() != 5 || win.merged != 40-5 {
		t.Errorf("%d keys held and %d merged, want 5 and 35", keys.Load(), win.merged)
	}
}
