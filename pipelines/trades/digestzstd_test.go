package trades

import (
	"bytes"
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

// The digest runner builds several clients from its options at once (one
// per partition restore), so the options must not hold a slice that
// kgo.NewClient rewrites: kgo.ProducerBatchCompression's codec list is
// deduplicated in place while a client is built, which the race detector
// reported from concurrent restores. Two clients of the options must not
// share their codec list, and their compressor must write zstd.
func TestDigestKafkaOptsShareNothingKgoRewrites(t *testing.T) {
	t.Parallel()
	opts, err := digestKafkaOpts([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")})
	if err != nil {
		t.Fatal(err)
	}
	var codecs [2][]kgo.CompressionCodec
	for i := range codecs {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		codecs[i] = cl.OptValue(kgo.ProducerBatchCompression).([]kgo.CompressionCodec)
		c, _ := cl.OptValue(kgo.WithCompressor).(kgo.Compressor)
		cl.Close()
		if c == nil {
			t.Fatal("the options build no compressor")
		}
		if _, codec := c.Compress(new(bytes.Buffer), bytes.Repeat([]byte("digest "), 64)); codec != kgo.CodecZstd {
			t.Fatalf("compressor writes codec %d, want zstd (%d)", codec, kgo.CodecZstd)
		}
	}
	if len(codecs[0]) > 0 && len(codecs[1]) > 0 && &codecs[0][0] == &codecs[1][0] {
		t.Fatal("two clients of the digest options share kgo.ProducerBatchCompression's codec list, which kgo.NewClient rewrites in place")
	}
}
