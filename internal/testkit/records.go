package testkit

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadTopicTimeout bounds one call of Kafka.ReadTopic.
const ReadTopicTimeout = 60 * time.Second

// offsetsTimeout bounds one call of EndOffsets or Committed.
const offsetsTimeout = 15 * time.Second

// ReadTopic returns every record of topic from the start of each partition
// up to the end offsets (high watermarks) it lists when called; records
// produced later are left out. Records of one partition are in offset
// order; partitions are interleaved in the order they were fetched.
// Transaction markers are never returned.
//
// It reads with a new direct (non-group) consumer on the cluster, closed
// before it returns, configured with the connection options followed by
// opts, e.g. kgo.FetchIsolationLevel(kgo.ReadCommitted()) to leave out
// aborted records. opts must not choose what to consume. A partition is read
// when a record at or past its captured end offset − 1 arrives, so
// compacted gaps do not stall it; under read_committed a transaction still
// open at the end offset stalls it until the transaction ends. The test
// fails on a fetch error or when the read takes longer than
// ReadTopicTimeout.
func (k *Kafka) ReadTopic(t testing.TB, topic string, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadTopicTimeout)
	defer cancel()
	admCl, err := kgo.NewClient(k.Opts(t)...)
	if err != nil {
		t.Fatalf("testkit: read %s: client: %v", topic, err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		t.Fatalf("testkit: read %s: list start offsets: %v", topic, err)
	}
	ends := listEnds(ctx, t, adm, topic)
	from := map[int32]kgo.Offset{}
	left := map[int32]bool{}
	for p, end := range ends {
		if s, ok := starts.Lookup(topic, p); ok && s.Offset < end {
			from[p] = kgo.NewOffset().At(s.Offset)
			left[p] = true
		}
	}
	if len(from) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(k.Opts(t), append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.KeepControlRecords(),
	}, opts...)...)...)
	if err != nil {
		t.Fatalf("testkit: read %s: consumer: %v", topic, err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("testkit: read %s: partitions %v not read to their end offsets %v after %s (%d records read): %v",
				topic, slices.Sorted(maps.Keys(left)), ends, ReadTopicTimeout, len(out), err)
		}
		fs.EachError(func(_ string, p int32, err error) {
			t.Fatalf("testkit: read %s: fetch partition %d: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			end := ends[r.Partition]
			if r.Offset >= end-1 {
				delete(left, r.Partition)
			}
			if r.Offset < end && !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// ReadCommitted is the ReadTopic option of a reader that sees committed
// records only (read_committed): the runtime writes dead letters in
// transactions, and an aborted attempt leaves copies that only
// read_uncommitted sees.
func ReadCommitted() kgo.Opt { return kgo.FetchIsolationLevel(kgo.ReadCommitted()) }

// EndOffsets returns the end offset (high watermark) of every partition of
// topic; an empty partition has 0. The test fails if the offsets cannot be
// listed.
func EndOffsets(t testing.TB, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), offsetsTimeout)
	defer cancel()
	return listEnds(ctx, t, adm, topic)
}

func listEnds(ctx context.Context, t testing.TB, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("testkit: list end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// Committed returns the offsets group has committed on the partitions of
// topic. A partition without a commit is absent, and so is one whose offset
// could not be fetched (e.g. UNSTABLE_OFFSET_COMMIT while a transactional
// commit is pending), so a caller polling for a commit sees it as not yet
// there; a group the broker does not know (GROUP_ID_NOT_FOUND) has none.
// The test fails if the request itself fails.
func Committed(t testing.TB, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), offsetsTimeout)
	defer cancel()
	resp, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{}
	}
	if err != nil {
		t.Fatalf("testkit: fetch offsets of group %s: %v", group, err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// Header returns the value of r's first header named key, and whether there
// is one.
func Header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// Headers returns r's headers as a map; of headers sharing a key, the last
// one wins.
func Headers(r *kgo.Record) map[string]string {
	out := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		out[h.Key] = string(h.Value)
	}
	return out
}
