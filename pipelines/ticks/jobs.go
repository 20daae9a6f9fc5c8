package ticks

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadJobs reads the compacted jobs topic from its start to its current end
// and returns the state of every job key, by partition, as the worker's
// state store restores it: the last record of a key, tombstones deleting
// it, records that do not decode skipped, and records of an owner that
// lost the partition written after the next owner's refused (see
// run.Token). partitions limits the read (nil: every partition). It fails
// when a requested partition does not exist (the topics are not
// co-partitioned).
func ReadJobs(ctx context.Context, kopts []kgo.Opt, topic string, partitions []int32) (map[int32]map[string]*JobState, error) {
	jobs, err := newJobStore(topic)
	if err != nil {
		return nil, err
	}
	got, err := jobs.Read(ctx, kopts, partitions)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]map[string]*JobState, len(got))
	for p, byKey := range got {
		out[p] = make(map[string]*JobState, len(byKey))
		for k, st := range byKey {
			out[p][k] = &st
		}
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
