// Package dlq operates on dead-letter topics: it parses DLQ records into
// typed views, filters them, prints them (Inspect), re-publishes them to the
// topic they came from (Redrive) and archives them into PostgreSQL (Archive).
//
// DLQ records carry the original key and value and the dlq.* headers named in
// package stages (docs/dead-letters.md, which lists the ones every DLQ record has at
// least; dlq.source.timestamp, the original record's Kafka timestamp in RFC
// 3339 with fractional seconds, is one more, see
// stages.HeaderSourceTimestamp). Nothing here deletes from a DLQ topic: Kafka
// topics are append-only, so a record stays in the DLQ after it was re-driven
// or archived, until retention removes it.
//
// Functions that talk to Kafka take the connection options ([]kgo.Opt: seed
// brokers, SASL, TLS, client id — for example kconf.Config.Opts) and create
// and close their own clients; they are safe to call concurrently.
package dlq

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// Record is a typed view of one DLQ record.
type Record struct {
	// Topic, Partition, Offset and Timestamp locate the record in the DLQ.
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time

	// Key and Value are the original record's bytes, unchanged.
	Key, Value []byte
	// Headers are all headers of the DLQ record, in order, dlq.* included.
	Headers []kgo.RecordHeader

	Reason string // dlq.reason
	Rule   string // dlq.rule, empty when no rule applied
	Error  string // dlq.error
	Stage  string // dlq.stage
	// SourceTopic, SourcePartition and SourceOffset locate the original
	// record; partition and offset are -1 when their header is absent.
	SourceTopic     string
	SourcePartition int32
	SourceOffset    int64
	Attempts        int       // dlq.attempts, 0 when absent
	FailedAt        time.Time // dlq.failed_at, zero when absent
	// SourceTimestamp is the original record's Kafka timestamp
	// (dlq.source.timestamp, RFC 3339 with fractional seconds, see
	// stages.HeaderSourceTimestamp), zero when absent: dead letters written
	// before the header existed lack it. Timestamp, the DLQ record's own,
	// is when the record was dead-lettered.
	SourceTimestamp time.Time
	// RedriveCount is how many redrives the record went through before it
	// failed again and came back to the DLQ (dlq.redrive_count, 0 when
	// absent). Redrive runs that send this DLQ record do not change it.
	RedriveCount int
	// ValueOmitted is set (dlq.value_omitted) on the stub of a record that
	// was too large for the DLQ topic: Key/Value/Headers are not the
	// original's, which stays at its source coordinates.
	ValueOmitted string
}

// Time is when the record failed: FailedAt, or the DLQ record's timestamp
// when the dlq.failed_at header is absent. Filters compare against it.
func (r Record) Time() time.Time {
	if !r.FailedAt.IsZero() {
		return r.FailedAt
	}
	return r.Timestamp
}

// Header returns the value of the last header named key.
func (r Record) Header(key string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}

// Parse builds the typed view of a DLQ record. Missing headers leave their
// field at its zero value (-1 for the source partition and offset), so a
// record written by hand with kcat parses. A header that is present but
// malformed (a partition that is not a number, a failed_at that is not RFC
// 3339) also leaves its field unset and is reported in the returned error;
// the Record is complete in every other respect and usable.
func Parse(kr *kgo.Record) (Record, error) {
	if kr == nil {
		return Record{}, errors.New("dlq: nil record")
	}
	r := Record{
		Topic:           kr.Topic,
		Partition:       kr.Partition,
		Offset:          kr.Offset,
		Timestamp:       kr.Timestamp,
		Key:             kr.Key,
		Value:           kr.Value,
		Headers:         slices.Clone(kr.Headers),
		SourcePartition: -1,
		SourceOffset:    -1,
	}
	var errs []error
	bad := func(h kgo.RecordHeader, err error) {
		errs = append(errs, fmt.Errorf("header %s=%q: %w", h.Key, h.Value, err))
	}
	for _, h := range kr.Headers {
		v := string(h.Value)
		switch h.Key {
		case stages.HeaderReason:
			r.Reason = v
		case stages.HeaderRule:
			r.Rule = v
		case stages.HeaderError:
			r.Error = v
		case stages.HeaderStage:
			r.Stage = v
		case stages.HeaderSourceTopic:
			r.SourceTopic = v
		case stages.HeaderSourcePartition:
			r.SourcePartition = parseHeader(h, -1, parsePartition, bad)
		case stages.HeaderSourceOffset:
			r.SourceOffset = parseHeader(h, -1, parseOffset, bad)
		case stages.HeaderAttempts:
			r.Attempts = parseHeader(h, 0, parseCount, bad)
		case stages.HeaderFailedAt:
			r.FailedAt = parseHeader(h, time.Time{}, parseTime, bad)
		case stages.HeaderSourceTimestamp:
			r.SourceTimestamp = parseHeader(h, time.Time{}, parseTime, bad)
		case stages.HeaderRedriveCount:
			r.RedriveCount = parseHeader(h, 0, parseCount, bad)
		case stages.HeaderValueOmitted:
			r.ValueOmitted = v
		}
	}
	if len(errs) > 0 {
		return r, fmt.Errorf("dlq: record %s[%d]@%d: %w", kr.Topic, kr.Partition, kr.Offset, errors.Join(errs...))
	}
	return r, nil
}

// parseHeader returns what parse makes of h's value (white space trimmed),
// or unset when the value is malformed: the error goes to bad, and a
// malformed header unsets its field even after a well-formed one of the
// same key.
func parseHeader[T any](h kgo.RecordHeader, unset T, parse func(string) (T, error), bad func(kgo.RecordHeader, error)) T {
	v, err := parse(strings.TrimSpace(string(h.Value)))
	if err != nil {
		bad(h, err)
		return unset
	}
	return v
}

// parsePartition parses a partition number: a base-10 int32 ≥ 0.
func parsePartition(s string) (int32, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	return int32(n), nonNegative(n, err)
}

// parseOffset parses an offset: a base-10 int64 ≥ 0.
func parseOffset(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, nonNegative(n, err)
}

// parseCount parses a count (attempts, redrives): a base-10 int ≥ 0.
func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	return n, nonNegative(n, err)
}

// parseTime parses an RFC 3339 time, fractional seconds allowed.
func parseTime(s string) (time.Time, error) {
	return time.Parse(time.RFC3339Nano, s)
}

// nonNegative is err, or an error when n is negative.
func nonNegative[N int | int64](n N, err error) error {
	if err == nil && n < 0 {
		return errors.New("negative")
	}
	return err
}

// Filter selects DLQ records. A zero Filter matches everything; each set
// field narrows the match (all set fields must match).
type Filter struct {
	// Reasons matches records whose dlq.reason is any of these.
	Reasons []string
	// Rules matches records whose dlq.rule is any of these.
	Rules []string
	// Since (inclusive) and Until (exclusive) bound Record.Time.
	Since, Until time.Time
	// SourceTopic matches records whose dlq.source.topic is this.
	SourceTopic string
	// At matches the records at these coordinates of the DLQ topic (a
	// selection made in the console).
	At []Position
}

// Empty reports whether f selects every record: no field is set.
func (f Filter) Empty() bool {
	return len(f.Reasons) == 0 && len(f.Rules) == 0 && f.Since.IsZero() && f.Until.IsZero() && f.SourceTopic == "" && len(f.At) == 0
}

// Position is a record's partition and offset in its topic.
type Position struct {
	Partition int32
	Offset    int64
}

// Match reports whether r passes every set criterion of f.
func (f Filter) Match(r Record) bool {
	if len(f.Reasons) > 0 && !slices.Contains(f.Reasons, r.Reason) {
		return false
	}
	if len(f.Rules) > 0 && !slices.Contains(f.Rules, r.Rule) {
		return false
	}
	t := r.Time()
	if !f.Since.IsZero() && t.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !t.Before(f.Until) {
		return false
	}
	if f.SourceTopic != "" && r.SourceTopic != f.SourceTopic {
		return false
	}
	if len(f.At) > 0 && !slices.Contains(f.At, Position{r.Partition, r.Offset}) {
		return false
	}
	return true
}
