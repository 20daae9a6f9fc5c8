package run

import (
	"context"
	"errors"
	"fmt"
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
