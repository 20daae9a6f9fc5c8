package stages

import (
	"fmt"
	"time"
)

// DLQ header names (the DLQ header contract, docs/dead-letters.md). Every DLQ record keeps the
// original key and value bytes and carries these headers.
const (
	HeaderReason          = "dlq.reason"
	HeaderRule            = "dlq.rule"
	HeaderError           = "dlq.error"
	HeaderStage           = "dlq.stage"
	HeaderSourceTopic     = "dlq.source.topic"
	HeaderSourcePartition = "dlq.source.partition"
	HeaderSourceOffset    = "dlq.source.offset"
	HeaderAttempts        = "dlq.attempts"
	HeaderFailedAt        = "dlq.failed_at"
	// HeaderRedriveCount counts how many times a record was re-driven from a
	// DLQ to its source topic and failed again (each redrive sends it with
	// one more; a DLQ writer keeps it). Redrive refuses records that reached
	// its limit: that bounds the depth of a fail → redrive → fail chain, not
	// how often redrive runs re-send one DLQ record (it stays in the DLQ with
	// its count).
	HeaderRedriveCount = "dlq.redrive_count"
	// HeaderValueOmitted marks a dead letter that could not carry the
	// original record because the DLQ topic refused its size: the DLQ record
	// has the dlq.* headers but no value and no source headers (and no key
	// when that was large too). The header says what was left out; the
	// original is at dlq.source.topic/partition/offset while that topic
	// retains it. Redrive refuses such records.
	HeaderValueOmitted = "dlq.value_omitted"
	// HeaderSourceTimestamp is the Kafka timestamp of the dead-lettered
	// source record, in UTC, RFC 3339 with the fractional seconds it has
	// (Go's time.RFC3339Nano; Kafka timestamps have millisecond
	// precision), e.g. 2024-05-01T09:00:00.123Z. Every DLQ writer sets it
	// with [SourceTimestamp]. The DLQ record's own Kafka timestamp is the
	// time it was dead-lettered (time-based retention of the DLQ topic
	// works on it). Redrive does not give it to the re-published record,
	// which the producer stamps with the time of the redrive, so that the
	// source topic's time-based retention does not delete it at once. It
	// is absent when the source record had no timestamp, and on dead
	// letters written before it existed.
	HeaderSourceTimestamp = "dlq.source.timestamp"
	// HeaderOrigin is set by redrive on the record it re-publishes: the
	// coordinates (topic/partition/offset, see [Origin]) of the record that
	// was dead-lettered first. A later redrive of the same record keeps it
	// (it is not a dlq.* header, so dead letters and redrives carry it
	// along), so a stage can tell a re-driven record from a new one with the
	// same content.
	HeaderOrigin = "sluice.origin"
)

// Origin returns the coordinates a stage compares with HeaderOrigin:
// "topic/partition/offset".
func Origin(topic string, partition int32, offset int64) string {
	return fmt.Sprintf("%s/%d/%d", topic, partition, offset)
}

// SourceTimestamp returns the value of the HeaderSourceTimestamp header of
// the dead letter of a record with Kafka timestamp t. ok is false when t is
// not a timestamp (the zero time, or before the Unix epoch, as the -1 of a
// record without one is): the header is then left out.
func SourceTimestamp(t time.Time) (value string, ok bool) {
	if t.IsZero() || t.UnixMilli() < 0 {
		return "", false
	}
	return t.UTC().Format(time.RFC3339Nano), true
}
