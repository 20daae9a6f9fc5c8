package kafkasink_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/kafkasink"
	"github.com/sluicehq/sluice/stages"
)

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32()) // incompressible: the broker sees its size
	}
	return b
}

// The topic refuses a record larger than its max.message.bytes, and a
// produce batch of records that fit alone but not together. Write names
// the record that can never fit as a rejection (so that the runtime
// dead-letters its source record instead of retrying the batch for ever)
// and lands every other record, the last copy of each in batch order.
func TestWriteRejectsRecordTooLargeForTheTopic(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	maxBytes := "16384"
	topic := k.Topic(t, "out", 1, map[string]*string{"max.message.bytes": &maxBytes})
	cl := k.Client(t)
	rng := rand.New(rand.NewPCG(3, 4))
	const huge = 4
	var batch []*kgo.Record
	for i := range 10 {
		size := 3000
		if i == huge {
			size = 64 << 10
		}
		v := append([]byte(fmt.Sprintf("r%d:", i)), randomBytes(rng, size)...)
		batch = append(batch, &kgo.Record{Topic: topic, Key: []byte("k"), Value: v})
	}
	err := kafkasink.Records(cl).Write(context.Background(), batch)
	var rej *stages.Rejections
	if !errors.As(err, &rej) {
		t.Fatalf("Write = %v, want *stages.Rejections naming the record too large", err)
	}
	if len(rej.Items) != 1 || rej.Items[0].Index != huge || rej.Items[0].Err == nil {
		t.Fatalf("rejections = %+v, want only index %d", rej.Items, huge)
	}
	got := k.ReadTopic(t, topic)
	var last []string // values in order of their last copy
	for _, r := range got {
		id := string(r.Value[:3])
		last = slices.DeleteFunc(last, func(s string) bool { return s == id })
		last = append(last, id)
	}
	want := []string{"r0:", "r1:", "r2:", "r3:", "r5:", "r6:", "r7:", "r8:", "r9:"}
	if !slices.Equal(last, want) {
		t.Fatalf("topic holds %v (by last copy, %d records), want %v", last, len(got), want)
	}
}
