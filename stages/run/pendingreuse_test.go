package run

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A worker's pending, reused from batch to batch, dead-letters each record
// of a batch once (indexes past a word of the bitset included), and a
// record index dead-lettered in the previous batch is dead-lettered again
// in the next; reset drops the references to the batch's outputs and
// dead letters.
func TestPendingReuseDeadLettersOncePerBatch(t *testing.T) {
	t.Parallel()
	var p pending[*string]
	for round := range 3 {
		out := "o"
		for _, i := range []int{3, 70, 3, 200, 70, 0, 200} {
			p.add(i, []*string{&out}, dlqItem{rec: &kgo.Record{Offset: int64(round*1000 + i)}, reason: "r", rule: "x"})
		}
		if len(p.dlq) != 4 || len(p.labels) != 4 || len(p.outs) != 7 {
			t.Fatalf("round %d: %d dead letters (%d labels), %d outputs; want 4, 4, 7", round, len(p.dlq), len(p.labels), len(p.outs))
		}
		for j, want := range []int64{3, 70, 200, 0} {
			if p.dlq[j].Offset != int64(round*1000)+want {
				t.Fatalf("round %d: dead letter %d at offset %d, want %d", round, j, p.dlq[j].Offset, int64(round*1000)+want)
			}
		}
		outs, dlq := p.outs, p.dlq
		p.reset()
		for j := range outs {
			if outs[j] != nil {
				t.Fatalf("round %d: output %d still referenced after reset", round, j)
			}
		}
		for j := range dlq {
			if dlq[j] != nil {
				t.Fatalf("round %d: dead letter %d still referenced after reset", round, j)
			}
		}
	}
}
