package ticks

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadJobs reads the compacted jobs topic from its start to its current end
// and returns the last state of every job key, by partition. partitions
// limits the read (nil: every partition). Tombstones delete a key; records
// that do not decode are skipped. It fails when a requested partition does
// not exist (the topics are not co-partitioned).
func ReadJobs(ctx context.Context, kopts []kgo.Opt, topic string, partitions []int32) (map[int32]map[string]*JobState, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, kopts...), kgo.FetchMaxWait(250*time.Millisecond))...)
	if err != nil {
		return nil, fmt.Errorf("read %s: client: %w", topic, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: start offsets: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: end offsets: %w", topic, err)
	}
	if partitions == nil {
		ends.Each(func(o kadm.ListedOffset) { partitions = append(partitions, o.Partition) })
	}
	out := make(map[int32]map[string]*JobState, len(partitions))
	want := map[int32]int64{}
	consume := map[int32]kgo.Offset{}
	for _, p := range partitions {
		out[p] = map[string]*JobState{}
		end, ok := ends.Lookup(topic, p)
		if !ok {
			return nil, fmt.Errorf("read %s: no partition %d (is it co-partitioned with the tasks topic?)", topic, p)
		}
		start, _ := starts.Lookup(topic, p)
		if end.Offset > start.Offset {
			want[p] = end.Offset
			consume[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(want) == 0 {
		return out, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: consume})
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) { ferr = fmt.Errorf("read %s/%d: %w", topic, p, err) })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Value == nil {
				delete(out[r.Partition], string(r.Key))
			} else {
				var st JobState
				if json.Unmarshal(r.Value, &st) == nil {
					out[r.Partition][string(r.Key)] = &st
				}
			}
			if r.Offset >= end-1 {
				delete(want, r.Partition)
			}
		})
	}
	return out, nil
}

// ReadJob returns the state of one job key (nil when there is none).
func ReadJob(ctx context.Context, kopts []kgo.Opt, topic, key string) (*JobState, error) {
	all, err := ReadJobs(ctx, kopts, topic, nil)
	if err != nil {
		return nil, err
	}
	for _, m := range all {
		if st, ok := m[key]; ok {
			return st, nil
		}
	}
	return nil, nil
}

// Flatten merges ReadJobs' result into one map by job key.
func Flatten(byPartition map[int32]map[string]*JobState) map[string]*JobState {
	out := map[string]*JobState{}
	for _, m := range byPartition {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// checkCoPartitioned verifies that tasks and jobs have the same partition
// count, which the single-writer design relies on.
func checkCoPartitioned(ctx context.Context, adm *kadm.Client, tasks, jobs string) error {
	td, err := adm.ListTopics(ctx, tasks, jobs)
	if err != nil {
		return fmt.Errorf("describe %s and %s: %w", tasks, jobs, err)
	}
	t, ok1 := td[tasks]
	j, ok2 := td[jobs]
	if !ok1 || !ok2 || t.Err != nil || j.Err != nil {
		return fmt.Errorf("topics %s and %s must exist (run sluice topics ensure)", tasks, jobs)
	}
	if len(t.Partitions) != len(j.Partitions) {
		return fmt.Errorf("%s has %d partitions but %s has %d: they must be co-partitioned", tasks, len(t.Partitions), jobs, len(j.Partitions))
	}
	return nil
}
