package run

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// A dead letter shares its source record's bytes until it is held: held
// (DLQTransactional) it is a copy, so what becomes of the fetched batch
// afterwards (its memory reused, say) does not change the dead letters the
// transaction commits; they carry the source's key, value and non-dlq.*
// headers, then the same dlq.* headers as DLQHeaders builds, with their
// values intact, however many dead letters share the unpacked arrays.
func TestHeldDeadLettersAreCopies(t *testing.T) {
	t.Parallel()
	r := &Runner[string, string]{cfg: Config{Name: "p", DLQTopic: "dlq"}, txn: &txnCommitter{}}
	r.mem = &heldBytes{b: NewBudget(MinBudget)}
	w := &worker[string, string]{r: r, tp: tp{"in", 1}}
	type src struct {
		key, val, hval []byte
	}
	var srcs []src
	var want [][]kgo.RecordHeader
	ts := time.UnixMilli(1_700_000_000_000)
	for b := range 3 {
		p := &pending[string]{}
		var recs []*kgo.Record
		for i := range 700 { // past unpackHeaders headers in all
			off := int64(b*1000 + i)
			s := src{fmt.Appendf(nil, "k%d", off), fmt.Appendf(nil, "value %d", off), fmt.Appendf(nil, "trace-%d", off)}
			srcs = append(srcs, s)
			rec := &kgo.Record{Topic: "in", Partition: 1, Offset: off, Timestamp: ts, Key: bytes.Clone(s.key), Value: bytes.Clone(s.val),
				Headers: []kgo.RecordHeader{{Key: "trace", Value: bytes.Clone(s.hval)}, {Key: stages.HeaderReason, Value: []byte("old")}}}
			recs = append(recs, rec)
			e := &stages.Error{Kind: stages.KindDeadLetter, Reason: stages.ReasonSanityFail, Rule: "r", Err: fmt.Errorf("bad %d", off)}
			d := w.dlqRecord(rec, e, 1+i%3, "p/stage")
			want = append(want, DLQHeaders([]stages.Header{{Key: "trace", Value: s.hval}, {Key: stages.HeaderReason, Value: []byte("old")}}, DLQMeta{
				Reason: e.Reason, Rule: e.Rule, Error: e.Err.Error(), Stage: "p/stage",
				Source:   stages.Source{Topic: "in", Partition: 1, Offset: off, Timestamp: ts},
				Attempts: 1 + i%3, FailedAt: failedAt(t, d.rec),
			}))
			p.addDLQ(i, d)
		}
		if err := w.produceDLQ(p); err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs { // the batch's memory, reused
			clear(rec.Key)
			clear(rec.Value)
			clear(rec.Headers[0].Value)
		}
	}
	got, err := w.held.records("dlq")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(srcs) {
		t.Fatalf("%d dead letters, want %d", len(got), len(srcs))
	}
	for i, g := range got {
		if g.Topic != "dlq" || !bytes.Equal(g.Key, srcs[i].key) || !bytes.Equal(g.Value, srcs[i].val) {
			t.Fatalf("dead letter %d: %s %q = %q, want dlq %q = %q", i, g.Topic, g.Key, g.Value, srcs[i].key, srcs[i].val)
		}
		if len(g.Headers) != len(want[i]) {
			t.Fatalf("dead letter %d: %d headers, want %d", i, len(g.Headers), len(want[i]))
		}
		for j, h := range want[i] {
			if g.Headers[j].Key != h.Key || !bytes.Equal(g.Headers[j].Value, h.Value) {
				t.Fatalf("dead letter %d header %d: %s=%q, want %s=%q", i, j, g.Headers[j].Key, g.Headers[j].Value, h.Key, h.Value)
			}
		}
	}
}

// failedAt returns the time in a dead letter's dlq.failed_at header.
func failedAt(t *testing.T, rec *kgo.Record) time.Time {
	t.Helper()
	for _, h := range rec.Headers {
		if h.Key == stages.HeaderFailedAt {
			at, err := time.Parse(time.RFC3339, string(h.Value))
			if err != nil {
				t.Fatal(err)
			}
			return at
		}
	}
	t.Fatal(errors.New("no dlq.failed_at header"))
	return time.Time{}
}
