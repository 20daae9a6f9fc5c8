package run

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// The committer bounds the dead letters it holds (txnMaxBytes) by what
// the workers submit with them; it holds them unpacked, as records: a
// worker whose held dead letters were compressed submits their bytes as
// records, not their compressed size, or the committer would hold the
// compression ratio times its bound.
func TestHeldDeadLettersSubmittedAtTheirRecordBytes(t *testing.T) {
	t.Parallel()
	c := &txnCommitter{pending: map[*txnOwner]*txnEntry{}, kick: make(chan struct{}, 1), freed: make(chan struct{})}
	r := &Runner[string, string]{cfg: Config{Name: "p", DLQTopic: "dlq"}, txn: c}
	r.mem = &heldBytes{b: NewBudget(MinBudget)}
	w := &worker[string, string]{r: r, tp: tp{"in", 1}, ctx: context.Background(), owner: &txnOwner{}}
	var last *kgo.Record
	for b := range 3 {
		p := &pending[string]{}
		for i := range 200 {
			off := int64(b*1000 + i)
			last = &kgo.Record{Topic: "in", Partition: 1, Offset: off, Key: fmt.Appendf(nil, "k%d", off),
				Value: fmt.Appendf(nil, `{"payload":{"text":"%s"}}`, strings.Repeat("Thị trường chứng khoán ", 20))}
			e := &stages.Error{Kind: stages.KindDeadLetter, Reason: stages.ReasonSanityFail, Rule: "r", Err: errors.New("bad")}
			p.addDLQ(i, w.dlqRecord(last, e, 1, "p/stage"))
		}
		if err := w.produceDLQ(p); err != nil {
			t.Fatal(err)
		}
	}
	held := w.held.bytes
	if err := w.markDone(last, 600); err != nil {
		t.Fatal(err)
	}
	e := c.pending[w.owner]
	if e == nil || len(e.dlq) != 600 {
		t.Fatalf("committer entry %+v, want 600 dead letters", e)
	}
	if want := recordsBytes(e.dlq); c.bytes < want {
		t.Errorf("the committer counts %d bytes for dead letters of %d bytes as records (the worker held them in %d)", c.bytes, want, held)
	}
	if got := r.mem.records.Load(); got != 0 {
		t.Errorf("%d bytes still counted in the worker's budget after the submit", got)
	}
}

// Held dead letters of large, incompressible values and headers, and
// empty ones, come back byte for byte whatever the batch sizes (a batch
// past the scratch bound, then small ones), and count at most their
// bytes plus the block overheads.
func TestHeldDeadLettersLargeAndEmpty(t *testing.T) {
	t.Parallel()
	r := &Runner[string, string]{cfg: Config{Name: "p", DLQTopic: "dlq"}, txn: &txnCommitter{}}
	r.mem = &heldBytes{b: NewBudget(MinBudget)}
	w := &worker[string, string]{r: r, tp: tp{"in", 1}}
	rng := rand.New(rand.NewPCG(9, 9))
	noise := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	var want []*kgo.Record
	for b, sizes := range [][]int{{3 << 20, 0, 1}, {0}, {70_000, 5, 0, 1 << 20}, {1}} {
		p := &pending[string]{}
		for i, n := range sizes {
			src := &kgo.Record{Topic: "in", Partition: 1, Offset: int64(b*10 + i), Key: noise(n / 3), Value: noise(n),
				Headers: []kgo.RecordHeader{{Key: string(noise(n / 5)), Value: noise(n / 2)}, {Key: "", Value: []byte{}}}}
			if n == 0 {
				src.Key, src.Value, src.Headers = nil, []byte{}, nil
			}
			e := &stages.Error{Kind: stages.KindDeadLetter, Reason: stages.ReasonSanityFail, Rule: "r", Err: errors.New("bad")}
			p.addDLQ(i, w.dlqRecord(src, e, 1, "p/stage"))
		}
		if err := w.produceDLQ(p); err != nil {
			t.Fatal(err)
		}
		want = append(want, p.dlq...)
	}
	if full := recordsBytes(want); w.held.bytes > full+int64(len(want))*heldOverhead+4*heldBlockOverhead+full/100 {
		t.Errorf("held dead letters count %d bytes, their records %d", w.held.bytes, full)
	}
	if cap(w.held.scratch) > maxHeldScratch || cap(w.held.encBuf) > 2*maxHeldScratch {
		t.Errorf("scratch buffers of %d and %d bytes kept", cap(w.held.scratch), cap(w.held.encBuf))
	}
	got, err := w.held.records("dlq")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d dead letters, want %d", len(got), len(want))
	}
	for i, g := range got {
		if !sameBytes(g.Key, want[i].Key) || !sameBytes(g.Value, want[i].Value) || len(g.Headers) != len(want[i].Headers) {
			t.Fatalf("dead letter %d: %d/%d key and value bytes, want %d/%d", i, len(g.Key), len(g.Value), len(want[i].Key), len(want[i].Value))
		}
		for j, h := range want[i].Headers {
			if g.Headers[j].Key != h.Key || !sameBytes(g.Headers[j].Value, h.Value) {
				t.Fatalf("dead letter %d header %d differs", i, j)
			}
		}
	}
}
