package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/stages"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// deadLetter is a DLQ record with the reason and rule it carries.
type dlqItem struct {
	rec    *kgo.Record
	reason stages.Reason
	rule   string
}

// sinkRejection returns the dead-letter classification of one item a sink
// rejected (the Rule and Err of a [stages.Rejection]). When err is itself a
// dead letter ([stages.Classify] reports KindDeadLetter: a sink passing on
// a caller's [stages.DeadLetter], as kafkasink does for its mapping
// function), its rule is dlq.rule when rule is empty, and its reason is
// dlq.reason when that is one of the design's (knownReason; sink_rejected
// otherwise, so that dlq.reason keeps the design's vocabulary). Any other
// rejection is sink_rejected with rule. Err is err either way, so
// dlq.error keeps the sink's message.
func sinkRejection(rule string, err error) *stages.Error {
	c := &stages.Error{Kind: stages.KindDeadLetter, Reason: stages.ReasonSinkRejected, Rule: rule, Err: err}
	if d := stages.Classify(err); d != nil && d.Kind == stages.KindDeadLetter {
		if knownReason(d.Reason) {
			c.Reason = d.Reason
		}
		if c.Rule == "" {
			c.Rule = d.Rule
		}
	}
	return c
}

// knownReason reports whether reason is one of the dlq.reason values fixed
// by the DLQ header contract (docs/dead-letters.md).
func knownReason(reason stages.Reason) bool { return slices.Contains(designReasons(), reason) }

// designReasons returns the dlq.reason values fixed by the DLQ header
// contract (docs/dead-letters.md), in a new slice.
func designReasons() []stages.Reason {
	return []stages.Reason{stages.ReasonSanityFail, stages.ReasonDecodeError, stages.ReasonUnknownTaskType,
		stages.ReasonSinkRejected, stages.ReasonRetriesExhausted, stages.ReasonException}
}

// dlqRecord builds the dead letter of rec: original key, value and
// non-DLQ headers, plus the DLQ headers (see DLQHeaders). A redrive count header
// from an earlier redrive is kept for the redrive loop guard.
//
// The dead letter shares rec's key, value and header values: it is
// produced (or, with DLQTransactional, packed into the worker's held
// block, heldDLQ.hold, which copies it) before the batch behind it is
// released, so it keeps no fetched batch alive.
func (w *worker[In, Out]) dlqRecord(rec *kgo.Record, c *stages.Error, attempts int, stage string) dlqItem {
	msg := ""
	if c.Err != nil {
		msg = c.Err.Error()
	}
	hs := make([]kgo.RecordHeader, 0, len(rec.Headers)+dlqMetaHeaders)
	for _, h := range rec.Headers {
		if keepSourceHeader(h.Key) {
			hs = append(hs, h)
		}
	}
	hs = appendDLQMeta(hs, DLQMeta{
		Reason: c.Reason, Rule: c.Rule, Error: msg, Stage: stage,
		Source:   stages.Source{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp},
		Attempts: attempts, FailedAt: time.Now(),
	})
	return dlqItem{rec: &kgo.Record{Topic: w.r.cfg.DLQTopic, Key: rec.Key, Value: rec.Value, Headers: hs}, reason: c.Reason, rule: c.Rule}
}

// maxDLQError bounds the dlq.error header: an error message that quotes its
// input (a huge field, say) must not make the dead letter too large for the
// DLQ topic.
const maxDLQError = 4 << 10

// truncateError cuts msg to at most maxDLQError bytes (see truncate).
func truncateError(msg string) string { return truncate(msg, maxDLQError) }

// truncate cuts msg to at most limit bytes (limit > 64), on a UTF-8
// boundary, saying how much was cut.
func truncate(msg string, limit int) string {
	if len(msg) <= limit {
		return msg
	}
	cut := limit - 64
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d more bytes cut)", msg[:cut], len(msg)-cut)
}

// omitValue returns the stub of a dead letter the DLQ topic refused as too
// large (see stages.HeaderValueOmitted): its dlq.* headers without the
// source record's value and headers, and without its key when that is
// larger than maxStubKey.
func omitValue(rec *kgo.Record, cause error) *kgo.Record {
	stub := &kgo.Record{Topic: rec.Topic, Key: rec.Key}
	omitted := fmt.Sprintf("value of %d bytes", len(rec.Value))
	if len(rec.Key) > maxStubKey {
		stub.Key = nil
		omitted = fmt.Sprintf("key of %d bytes, %s", len(rec.Key), omitted)
	}
	n := 0
	for _, h := range rec.Headers {
		if h.Key == stages.HeaderError {
			h.Value = []byte(truncate(string(h.Value), maxStubError))
		}
		if strings.HasPrefix(h.Key, "dlq.") {
			stub.Headers = append(stub.Headers, h)
		} else {
			n++
		}
	}
	if n > 0 {
		omitted = fmt.Sprintf("%s, %d source header(s)", omitted, n)
	}
	omitted += " (the DLQ topic refused the record: " + truncate(cause.Error(), maxStubError) + ")"
	stub.Headers = append(stub.Headers, kgo.RecordHeader{Key: stages.HeaderValueOmitted, Value: []byte(omitted)})
	return stub
}

// maxStubKey is the largest key a stub dead letter keeps; maxStubError
// bounds the error texts it carries.
const (
	maxStubKey   = 1 << 10
	maxStubError = 512
)

// tooLarge reports whether a produce error says the record can never fit.
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// errTooLarge reports a produce refused as too large (see tooLarge).
var errTooLarge = errors.New("record refused as too large")

// ruleTooLarge is the dlq.rule of a source record whose output the output
// topic refused as too large (the rule kafkasink's rejections carry).
const ruleTooLarge = "kafka.too_large"

// produceDLQ produces p's dead letters, retrying those that failed until
// they are acknowledged or the worker stops, and counts them. A dead letter
// the DLQ topic refuses as too large is replaced at once by its stub (see
// stages.HeaderValueOmitted) instead of being retried forever. A stub the
// DLQ topic still refuses as too large (its max.message.bytes is below the
// dlq.* headers alone) can never be produced: that is a fatal error (see
// stubTooLarge), and the offsets behind it are not marked.
//
// With Config.DLQCommit DLQTransactional the dead letters are held by the
// worker instead (their bytes count in the memory budget) and handed to
// the runner's committer with the offset that follows them (markDone),
// which produces them in the transaction of that offset's commit.
func (w *worker[In, Out]) produceDLQ(p *pending[Out]) error {
	r := w.r
	if r.cfg.NoDLQ {
		return noDLQ(p.dlq[0])
	}
	if r.txn != nil {
		w.holdRecords(w.held.hold(p.dlq, p.labels))
		return nil
	}
	defer w.doing(blockedDLQ)()
	t0 := time.Now()
	// The broker refuses a whole batch when it is too large: its records
	// are produced one at a time, in order, to find those that do not fit
	// alone, and each of those is sent as its stub at once. A stub refused
	// in a batch (with a large dead letter) says nothing until it is
	// refused alone.
	err := w.produceAcked(p.dlq, "dlq", "DLQ produce failed, retrying", func(rec *kgo.Record, _ error) error {
		return produceDeadLetter(w.ctx, r.cl, r.o.log, r.cfg.DLQTopic, rec, func(rec *kgo.Record) error {
			return r.cl.ProduceSync(w.ctx, rec).FirstErr()
		})
	})
	if err != nil {
		return err
	}
	for _, l := range p.labels {
		r.m.deadLettered(stages.Reason(l[0]), l[1])
	}
	r.m.batchDur.WithLabelValues("dlq").Observe(time.Since(t0).Seconds())
	return nil
}

// produceDeadLetter produces the dead letter rec alone with produce and,
// when the DLQ topic refuses it as too large, its stub instead (see
// omitValue; a stub is not stubbed again). It returns nil once one of them
// is acknowledged, the fatal stubTooLarge error when the stub is refused as
// too large too (no dead letter of the record fits the DLQ topic), or the
// produce error otherwise (a transient failure: produce rec again). It is
// the one too-large fallback of dead letters, for the batch runner and the
// transactional one.
func produceDeadLetter(ctx context.Context, cl *kgo.Client, log *slog.Logger, dlqTopic string, rec *kgo.Record, produce func(*kgo.Record) error) error {
	err := produce(rec)
	if err == nil || !tooLarge(err) {
		return err
	}
	if !hasHeader(rec, stages.HeaderValueOmitted) {
		log.Warn("dead letter too large for the DLQ topic, producing it without the record's value",
			"topic", dlqTopic, "value_bytes", len(rec.Value), "err", err)
		rec = omitValue(rec, err)
		if err = produce(rec); err == nil || !tooLarge(err) {
			return err
		}
	}
	return stubTooLarge(ctx, cl, dlqTopic, rec, err)
}

func hasHeader(rec *kgo.Record, key string) bool {
	_, ok := headerValue(rec, key)
	return ok
}

// headerValue returns the value of rec's first header named key.
func headerValue(rec *kgo.Record, key string) (string, bool) {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// stubTooLarge returns the fatal error for a dead-letter stub that the DLQ
// topic refused as too large (cause): no dead letter of that record fits
// the topic, so retrying would hang the partition and skipping it would
// lose the record. The error names the source record, the DLQ topic and its
// max.message.bytes (looked up with cl for the message; "unknown" when the
// lookup fails).
func stubTooLarge(ctx context.Context, cl *kgo.Client, dlqTopic string, stub *kgo.Record, cause error) error {
	topic, _ := headerValue(stub, stages.HeaderSourceTopic)
	part, _ := headerValue(stub, stages.HeaderSourcePartition)
	off, _ := headerValue(stub, stages.HeaderSourceOffset)
	return stages.Fatal(fmt.Errorf("dead letter of %s/%s@%s does not fit the DLQ topic %s even as a stub with only its dlq.* headers "+
		"(the topic's max.message.bytes %s); raise it: %w", topic, part, off, dlqTopic, maxMessageBytes(ctx, cl, dlqTopic), cause))
}

// maxMessageBytes returns topic's max.message.bytes, for error messages.
func maxMessageBytes(ctx context.Context, cl *kgo.Client, topic string) string {
	ctx, cancel := context.WithTimeout(ctx, readBackTimeout)
	defer cancel()
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return fmt.Sprintf("unknown: %v", err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return fmt.Sprintf("unknown: %v", err)
	}
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" {
			return c.MaybeValue()
		}
	}
	return "unknown: not described"
}

// DLQMeta describes one dead letter for [DLQHeaders].
type DLQMeta struct {
	Reason   stages.Reason
	Rule     string // empty when no rule applies
	Error    string // dlq.error; cut to 4 KiB (see DLQHeaders)
	Stage    string
	Source   stages.Source // the dead-lettered record's coordinates and timestamp
	Attempts int
	FailedAt time.Time
}

// DLQHeaders returns the headers of a dead letter (docs/dead-letters.md): the source
// record's own headers except earlier dlq.* ones (dlq.redrive_count is kept
// for redrive's loop guard), then dlq.reason, dlq.rule, dlq.error (cut to
// 4 KiB, so that an error quoting a huge input cannot make the dead letter
// too large for the DLQ topic), dlq.stage, dlq.source.topic,
// dlq.source.partition, dlq.source.offset, dlq.attempts, dlq.failed_at
// (RFC 3339, UTC, to the second) and, when the source record had a
// timestamp, dlq.source.timestamp. Every DLQ writer of sluice builds its
// headers with it, so they all write the same set.
func DLQHeaders(own []stages.Header, d DLQMeta) []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, 0, len(own)+dlqMetaHeaders)
	for _, h := range own {
		if keepSourceHeader(h.Key) {
			hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
	}
	return appendDLQMeta(hs, d)
}

// keepSourceHeader reports whether a source record's header named key
// goes into its dead letter: all but earlier dlq.* ones, save
// dlq.redrive_count.
func keepSourceHeader(key string) bool {
	return !strings.HasPrefix(key, "dlq.") || key == stages.HeaderRedriveCount
}

// dlqMetaHeaders is how many headers appendDLQMeta appends at most.
const dlqMetaHeaders = 10

// dlqMetaKeys returns the keys of the headers appendDLQMeta appends, in
// its order (the last only when the source record has a timestamp).
func dlqMetaKeys() [dlqMetaHeaders]string {
	return [dlqMetaHeaders]string{stages.HeaderReason, stages.HeaderRule, stages.HeaderError, stages.HeaderStage,
		stages.HeaderSourceTopic, stages.HeaderSourcePartition, stages.HeaderSourceOffset, stages.HeaderAttempts,
		stages.HeaderFailedAt, stages.HeaderSourceTimestamp}
}

// appendDLQMeta appends the dlq.* headers of d (see DLQHeaders) to hs.
// Their values share one allocation, each capped at its length.
func appendDLQMeta(hs []kgo.RecordHeader, d DLQMeta) []kgo.RecordHeader {
	ts, hasTS := stages.SourceTimestamp(d.Source.Timestamp)
	msg := truncateError(d.Error)
	keys := dlqMetaKeys()
	var ends [dlqMetaHeaders]int
	b := make([]byte, 0, len(d.Reason)+len(d.Rule)+len(msg)+len(d.Stage)+len(d.Source.Topic)+len(ts)+64)
	b = append(b, d.Reason...)
	ends[0] = len(b)
	b = append(b, d.Rule...)
	ends[1] = len(b)
	b = append(b, msg...)
	ends[2] = len(b)
	b = append(b, d.Stage...)
	ends[3] = len(b)
	b = append(b, d.Source.Topic...)
	ends[4] = len(b)
	b = strconv.AppendInt(b, int64(d.Source.Partition), 10)
	ends[5] = len(b)
	b = strconv.AppendInt(b, d.Source.Offset, 10)
	ends[6] = len(b)
	b = strconv.AppendInt(b, int64(d.Attempts), 10)
	ends[7] = len(b)
	b = d.FailedAt.UTC().AppendFormat(b, time.RFC3339)
	ends[8] = len(b)
	b = append(b, ts...)
	ends[9] = len(b)
	n := dlqMetaHeaders
	if !hasTS {
		n-- // no dlq.source.timestamp
	}
	from := 0
	for i, end := range ends[:n] {
		hs = append(hs, kgo.RecordHeader{Key: keys[i], Value: b[from:end:end]})
		from = end
	}
	return hs
}
