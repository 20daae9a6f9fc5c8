package run

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// With DLQTransactional a worker holds its dead letters packed until its
// window commits: each comes back to the committer as the same record
// (key, value and headers, nil ones kept nil, on the DLQ topic), and
// counts in the memory budget at well under the bytes of the record it
// packs (silver holds thousands per window, taken from the windows'
// share of the budget).
func TestHeldDeadLettersPacked(t *testing.T) {
	t.Parallel()
	r := &Runner[string, string]{cfg: Config{Name: "p", DLQTopic: "dlq"}, txn: &txnCommitter{}}
	r.mem = &heldBytes{b: NewBudget(MinBudget)}
	w := &worker[string, string]{r: r, tp: tp{"in", 3}}
	srcs := []*kgo.Record{
		{Topic: "in", Partition: 3, Offset: 7, Key: []byte("k1"), Value: []byte(strings.Repeat("v", 300)),
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t")}, {Key: "nil", Value: nil}}},
		{Topic: "in", Partition: 3, Offset: 8, Key: nil, Value: nil},
		{Topic: "in", Partition: 3, Offset: 9, Key: []byte{}, Value: []byte("{}")},
	}
	p := &pending[string]{}
	for i, src := range srcs {
		c := &stages.Error{Kind: stages.KindDeadLetter, Reason: stages.ReasonSanityFail, Rule: "x.rule", Err: errors.New("field out of range")}
		p.addDLQ(i, w.dlqRecord(src, c, 1, "p/stage"))
	}
	if err := w.produceDLQ(p); err != nil {
		t.Fatal(err)
	}
	if full := recordsBytes(p.dlq); w.held.bytes >= full*3/4 || r.mem.records.Load() != w.held.bytes {
		t.Errorf("held dead letters count %d bytes in the budget (records: %d), want < 3/4 of the %d of their records",
			w.held.bytes, r.mem.records.Load(), full)
	}
	got, err := w.held.records("dlq")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(p.dlq) {
		t.Fatalf("%d held dead letters, want %d", len(got), len(p.dlq))
	}
	for i, want := range p.dlq {
		g := got[i]
		if g.Topic != "dlq" || !sameBytes(g.Key, want.Key) || !sameBytes(g.Value, want.Value) || len(g.Headers) != len(want.Headers) {
			t.Fatalf("dead letter %d: topic %q key %q value %q, %d headers; want %q %q %q, %d", i, g.Topic, g.Key, g.Value, len(g.Headers),
				want.Topic, want.Key, want.Value, len(want.Headers))
		}
		for j, h := range want.Headers {
			if g.Headers[j].Key != h.Key || !sameBytes(g.Headers[j].Value, h.Value) {
				t.Errorf("dead letter %d header %d: %q=%q, want %q=%q", i, j, g.Headers[j].Key, g.Headers[j].Value, h.Key, h.Value)
			}
		}
	}
}

// sameBytes compares a and b, nil apart from empty.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// Held dead letters are compressed a batch at a time: those of records
// alike (JSON of one source, the same dlq.* headers) count in the budget
// at a fraction of their bytes, and come back from several batches in
// order, each the record it was.
func TestHeldDeadLettersCompressed(t *testing.T) {
	t.Parallel()
	r := &Runner[string, string]{cfg: Config{Name: "p", DLQTopic: "dlq"}, txn: &txnCommitter{}}
	r.mem = &heldBytes{b: NewBudget(MinBudget)}
	w := &worker[string, string]{r: r, tp: tp{"in", 1}}
	var want []*kgo.Record
	full := int64(0)
	for b := range 3 {
		p := &pending[string]{}
		for i := range 200 {
			off := int64(b*1000 + i)
			src := &kgo.Record{Topic: "in", Partition: 1, Offset: off, Key: fmt.Appendf(nil, "https://example.vn/tin-tuc/bai-viet-%d.html", off),
				Value: fmt.Appendf(nil, `{"task_type":"sa.article","payload":{"url_canonical":"https://example.vn/tin-tuc/bai-viet-%d.html","publisher_time":"2999-01-01T00:00:00Z","text_normalized":"%s"}}`,
					off, strings.Repeat("Thị trường chứng khoán ", 10+i%7))}
			c := &stages.Error{Kind: stages.KindDeadLetter, Reason: stages.ReasonSanityFail, Rule: "sa.publisher_time", Err: errors.New("publisher_time in the future")}
			p.addDLQ(i, w.dlqRecord(src, c, 1, "p/stage"))
		}
		if err := w.produceDLQ(p); err != nil {
			t.Fatal(err)
		}
		want = append(want, p.dlq...)
		full += recordsBytes(p.dlq)
	}
	if w.held.bytes >= full/3 || r.mem.records.Load() != w.held.bytes {
		t.Errorf("%d held dead letters count %d bytes in the budget (records: %d), want < 1/3 of the %d of their records",
			len(want), w.held.bytes, r.mem.records.Load(), full)
	}
	got, err := w.held.records("dlq")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(w.held.labels) != len(want) {
		t.Fatalf("%d held dead letters (%d labels), want %d", len(got), len(w.held.labels), len(want))
	}
	for i, g := range got {
		if g.Topic != "dlq" || !bytes.Equal(g.Key, want[i].Key) || !bytes.Equal(g.Value, want[i].Value) || len(g.Headers) != len(want[i].Headers) {
			t.Fatalf("dead letter %d: key %q, want %q", i, g.Key, want[i].Key)
		}
		for j, h := range want[i].Headers {
			if g.Headers[j].Key != h.Key || !sameBytes(g.Headers[j].Value, h.Value) {
				t.Fatalf("dead letter %d header %d: %q=%q, want %q=%q", i, j, g.Headers[j].Key, g.Headers[j].Value, h.Key, h.Value)
			}
		}
	}
	w.held.dlq[1] = w.held.dlq[1][:len(w.held.dlq[1])/2]
	if _, err := w.held.records("dlq"); err == nil {
		t.Error("a corrupt block of held dead letters read without an error")
	}
}
