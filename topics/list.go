package topics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// PartitionOffsets are the log start and end (high watermark) offsets of one
// partition.
type PartitionOffsets struct {
	Partition int32
	Start     int64
	End       int64
}

// Info summarises one topic.
type Info struct {
	Topic string
	// Exists is false when a requested topic is not on the cluster; the
	// other fields are then zero.
	Exists            bool
	Partitions        int32
	ReplicationFactor int16
	// Cleanup is the cleanup.policy config value.
	Cleanup string
	// Retention is retention.ms: Infinite for -1.
	Retention time.Duration
	// Offsets are per partition, ordered by partition.
	Offsets []PartitionOffsets
	// Records is the sum of End − Start over partitions: the records
	// currently retained. On compacted topics it is an upper bound (offsets
	// removed by compaction still count), and transaction markers count too.
	Records int64
}

// List describes the named topics in the given order, or every non-internal
// topic sorted by name when names is empty: partitions, replication factor,
// cleanup policy, retention and per-partition start/end offsets. A requested
// topic that does not exist yields an Info with Exists false. The error
// reports a failure to talk to the cluster or to load a partition's offsets.
func List(ctx context.Context, adm *kadm.Client, names []string) ([]Info, error) {
	details, err := describeTopics(ctx, adm, names...)
	if err != nil {
		return nil, fmt.Errorf("topics: list topics: %w", err)
	}
	if len(names) == 0 {
		names = details.Names()
	}
	infos := make([]Info, len(names))
	var present []string
	for i, n := range names {
		infos[i].Topic = n
		d, ok := details[n]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			continue
		case d.Err != nil:
			return nil, fmt.Errorf("topics: describe %s: %w", n, d.Err)
		}
		infos[i].Exists = true
		infos[i].Partitions = int32(len(d.Partitions))
		infos[i].ReplicationFactor = replicationFactor(d)
		present = append(present, n)
	}
	if len(present) == 0 {
		return infos, nil
	}

	rcs, err := adm.DescribeTopicConfigs(ctx, present...)
	if err != nil {
		return nil, fmt.Errorf("topics: describe configs: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, present...)
	if err != nil {
		return nil, fmt.Errorf("topics: list start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, present...)
	if err != nil {
		return nil, fmt.Errorf("topics: list end offsets: %w", err)
	}
	for i := range infos {
		in := &infos[i]
		if !in.Exists {
			continue
		}
		if rc, err := rcs.On(in.Topic, nil); err == nil && rc.Err == nil {
			for _, c := range rc.Configs {
				switch c.Key {
				case ConfigCleanupPolicy:
					in.Cleanup = c.MaybeValue()
				case ConfigRetentionMs:
					in.Retention = parseRetention(c.MaybeValue())
				}
			}
		}
		for p := range in.Partitions {
			s, okS := starts.Lookup(in.Topic, p)
			e, okE := ends.Lookup(in.Topic, p)
			if !okS || !okE {
				return nil, fmt.Errorf("topics: no offsets for %s[%d]", in.Topic, p)
			}
			if err := errors.Join(s.Err, e.Err); err != nil {
				return nil, fmt.Errorf("topics: offsets of %s[%d]: %w", in.Topic, p, err)
			}
			in.Offsets = append(in.Offsets, PartitionOffsets{Partition: p, Start: s.Offset, End: e.Offset})
			if e.Offset > s.Offset {
				in.Records += e.Offset - s.Offset
			}
		}
		slices.SortFunc(in.Offsets, func(a, b PartitionOffsets) int { return int(a.Partition - b.Partition) })
	}
	return infos, nil
}
