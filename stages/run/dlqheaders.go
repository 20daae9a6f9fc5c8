package run

import (
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// DeadLetter describes one dead letter for [DLQHeaders].
type DeadLetter struct {
	Reason   stages.Reason
	Rule     string // empty when no rule applies
	Error    string // dlq.error; cut to 4 KiB (see DLQHeaders)
	Stage    string
	Source   stages.Source // the dead-lettered record's coordinates and timestamp
	Attempts int
	FailedAt time.Time
}

// DLQHeaders returns the headers of a dead letter (DESIGN §3): the source
// record's own headers except earlier dlq.* ones (dlq.redrive_count is kept
// for redrive's loop guard), then dlq.reason, dlq.rule, dlq.error (cut to
// 4 KiB, so that an error quoting a huge input cannot make the dead letter
// too large for the DLQ topic), dlq.stage, dlq.source.topic,
// dlq.source.partition, dlq.source.offset, dlq.attempts, dlq.failed_at
// (RFC 3339, UTC, to the second) and, when the source record had a
// timestamp, dlq.source.timestamp. Every DLQ writer of sluice builds its
// headers with it, so they all write the same set.
func DLQHeaders(own []stages.Header, d DeadLetter) []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, 0, len(own)+10)
	for _, h := range own {
		if strings.HasPrefix(h.Key, "dlq.") && h.Key != stages.HeaderRedriveCount {
			continue
		}
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	hs = append(hs,
		kgo.RecordHeader{Key: stages.HeaderReason, Value: []byte(d.Reason)},
		kgo.RecordHeader{Key: stages.HeaderRule, Value: []byte(d.Rule)},
		kgo.RecordHeader{Key: stages.HeaderError, Value: []byte(truncateError(d.Error))},
		kgo.RecordHeader{Key: stages.HeaderStage, Value: []byte(d.Stage)},
		kgo.RecordHeader{Key: stages.HeaderSourceTopic, Value: []byte(d.Source.Topic)},
		kgo.RecordHeader{Key: stages.HeaderSourcePartition, Value: []byte(strconv.Itoa(int(d.Source.Partition)))},
		kgo.RecordHeader{Key: stages.HeaderSourceOffset, Value: []byte(strconv.FormatInt(d.Source.Offset, 10))},
		kgo.RecordHeader{Key: stages.HeaderAttempts, Value: []byte(strconv.Itoa(d.Attempts))},
		kgo.RecordHeader{Key: stages.HeaderFailedAt, Value: []byte(d.FailedAt.UTC().Format(time.RFC3339))},
	)
	if ts, ok := stages.SourceTimestamp(d.Source.Timestamp); ok {
		hs = append(hs, kgo.RecordHeader{Key: stages.HeaderSourceTimestamp, Value: []byte(ts)})
	}
	return hs
}
