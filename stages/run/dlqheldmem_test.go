package run

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// Held dead letters handed to the committer (markDone) count in its bound
// (txnMaxBytes) at their records' bytes (recordsBytes): unpacking them
// must not allocate much more than that, or a committer holding many
// small submissions (one dead letter per window, say, across commits that
// fail) holds far more memory than it counts. One held dead letter
// unpacks into about its own bytes, not into an array sized for a
// thousand headers.
func TestHeldDeadLetterUnpacksIntoWhatItCounts(t *testing.T) {
	// Not parallel: it measures the bytes allocated by the process.
	r := &Runner[string, string]{cfg: Config{Name: "p", DLQTopic: "dlq"}, txn: &txnCommitter{}}
	r.mem = &heldBytes{b: NewBudget(MinBudget)}
	w := &worker[string, string]{r: r, tp: tp{"in", 1}}
	src := &kgo.Record{Topic: "in", Partition: 1, Offset: 7, Key: []byte("k7"), Value: []byte("value 7"),
		Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t-7")}}}
	p := &pending[string]{}
	p.addDLQ(0, w.dlqRecord(src, &stages.Error{Kind: stages.KindDeadLetter, Reason: stages.ReasonSanityFail, Rule: "r", Err: fmt.Errorf("bad")}, 1, "p/stage"))
	if err := w.produceDLQ(p); err != nil {
		t.Fatal(err)
	}
	var counted int64
	minAlloc := uint64(1 << 62)
	var ms runtime.MemStats
	for range 50 { // the fewest bytes: other goroutines' allocations only add
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		recs, err := w.held.records("dlq")
		runtime.ReadMemStats(&ms)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || string(recs[0].Value) != "value 7" || len(recs[0].Headers) != len(p.dlq[0].Headers) {
			t.Fatalf("unpacked %d dead letters: %+v", len(recs), recs)
		}
		counted = recordsBytes(recs)
		minAlloc = min(minAlloc, ms.TotalAlloc-before)
	}
	if minAlloc > uint64(2*counted) {
		t.Fatalf("one held dead letter counting %d bytes unpacks into %d bytes allocated", counted, minAlloc)
	}
	t.Logf("counted %d bytes, allocated %d", counted, minAlloc)
}
