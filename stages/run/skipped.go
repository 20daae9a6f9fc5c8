package run

import (
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// noteSkipped makes visible the offsets of w's partition that were deleted
// from the log before this member consumed them: the group's committed
// offset fell below the log start while no member ran, or the log start
// passed the fetch position (of a paused partition, say). Retention or
// DeleteRecords removed those records; kgo resumes at the log start, and
// this logs a WARN with the offset range and counts it in
// sluice_offsets_skipped_total (see reportSkipped). Gaps above the log
// start (compaction, transaction markers) are not skips, and neither are
// the records a group without a commit never had (see committedOffset).
// Called by the poll loop only, before w.push, with records in p.
func (r *Runner[In, Out]) noteSkipped(w *worker[In, Out], p kgo.FetchTopicPartition) {
	from := w.next
	w.next = p.Records[len(p.Records)-1].Offset + 1
	if from < 0 {
		c, ok := committedOffset(r.cl.CommittedOffsets(), p.Topic, p.Partition)
		if !ok {
			return
		}
		from = c
	}
	if to, ok := skippedTo(from, p); ok {
		reportSkipped(r.m, r.o.log, p.Topic, p.Partition, from, to)
	}
}

// committedOffset returns the group's committed offset of topic/partition
// in committed (kgo.Client.CommittedOffsets: fetched when the partition was
// assigned, or committed since), and false when the group has none. kgo
// lists a partition it consumed without a commit as committed at offset 0
// with epoch -1; that placeholder is no commit (a brand-new group starting
// at the log start of a topic whose early records retention removed skips
// nothing it ever had).
func committedOffset(committed map[string]map[int32]kgo.EpochOffset, topic string, partition int32) (int64, bool) {
	c, ok := committed[topic][partition]
	if !ok || c.Offset < 0 || c == (kgo.EpochOffset{Epoch: -1, Offset: 0}) {
		return 0, false
	}
	return c.Offset, true
}

// skippedTo reports whether p's records start past from, the offset
// expected next, because the log start passed from; the offsets from..to
// (to excluded) were deleted before they were consumed. Gaps above the log
// start are not skips.
func skippedTo(from int64, p kgo.FetchTopicPartition) (to int64, skipped bool) {
	first := p.Records[0].Offset
	if from < 0 || first <= from || from >= p.LogStartOffset {
		return 0, false
	}
	return min(first, p.LogStartOffset), true
}

// reportSkipped logs a WARN naming the deleted offsets from..to (to
// excluded) of topic/partition and counts them in
// sluice_offsets_skipped_total.
func reportSkipped(m *metrics, log *slog.Logger, topic string, partition int32, from, to int64) {
	m.skipped.WithLabelValues(topic).Add(float64(to - from))
	log.Warn("records deleted before they were consumed (retention or DeleteRecords passed the group's position); resuming at the log start",
		"topic", topic, "partition", partition, "from", from, "to", to, "skipped", to-from)
}
