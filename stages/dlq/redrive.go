package dlq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// DefaultMaxRedrives is the loop guard used when RedriveRequest.MaxRedrives
// is not set: a record whose dlq.redrive_count is at least this is refused.
//
// The guard limits the depth of a fail → redrive → fail chain: the count is
// carried by the re-published record and comes back to the DLQ with it when
// it fails again. It does not limit how often one DLQ record is sent: the
// record stays in the DLQ with its count unchanged, so every redrive run
// whose filter matches it sends it again while its count is below the
// limit (see RedriveResult.StartedAt to avoid that).
const DefaultMaxRedrives = 3

// redriveBatch is how many records Redrive produces per synchronous batch.
const redriveBatch = 500

// Decision is what Redrive does with a record that matched the filter.
type Decision int

const (
	// Send re-publishes the record to its source topic.
	Send Decision = iota
	// Refuse skips a record whose redrive count reached the limit (or is
	// unreadable): the loop guard (see DefaultMaxRedrives for what it
	// limits).
	Refuse
	// Unroutable skips a record without a dlq.source.topic header, or
	// whose source topic does not exist (any more).
	Unroutable
	// Omitted skips the stub of a record that was too large for the DLQ
	// (dlq.value_omitted): it does not hold the original, and re-sending it
	// would publish an empty record. The original is at its source
	// coordinates while the source topic retains it.
	Omitted
	// Duplicate skips a second dead letter of a source record this run
	// already decided to send: the same dlq.source.topic,
	// dlq.source.partition, dlq.source.offset and dlq.redrive_count (a
	// copy left by a member that dead-lettered the record and crashed
	// before its commit, under at-least-once dead letters).
	Duplicate
)

func (d Decision) String() string {
	switch d {
	case Send:
		return "send"
	case Refuse:
		return "refuse"
	case Unroutable:
		return "unroutable"
	case Omitted:
		return "omitted"
	case Duplicate:
		return "duplicate"
	default:
		return "decision(" + strconv.Itoa(int(d)) + ")"
	}
}

// RedriveRequest says which DLQ records to re-publish.
type RedriveRequest struct {
	DLQTopic string
	Filter   Filter
	// DryRun reads and decides but produces nothing.
	DryRun bool
	// MaxRedrives refuses records whose dlq.redrive_count is already at
	// least this (default DefaultMaxRedrives when <= 0): records that went
	// through that many redrives and failed again each time. Records below
	// it are sent by every run that matches them (see DefaultMaxRedrives).
	MaxRedrives int
	// Each, when set, is called for every record that matched the filter,
	// with the decision, in DLQ partition order, before it is produced.
	Each func(Record, Decision)
}

// RedriveResult counts what Redrive did.
type RedriveResult struct {
	// Scanned is how many DLQ records were read.
	Scanned int
	// Sent is how many were re-published (with DryRun: would have been).
	Sent int
	// Filtered is how many did not match the filter.
	Filtered int
	// Refused is how many matched but hit the loop guard.
	Refused int
	// Unroutable is how many matched but carry no source topic, or one
	// that does not exist.
	Unroutable int
	// Omitted is how many matched but are stubs without the original
	// record (dlq.value_omitted).
	Omitted int
	// Duplicates is how many matched but are further dead letters of a
	// source record already sent (or, with DryRun, to be sent) by this run.
	Duplicates int
	// StartedAt is when the redrive started reading, in UTC, truncated to
	// the second: dlq.failed_at is written to the second, so a re-driven
	// record that failed again in the second the redrive started has a
	// dlq.failed_at before the exact start. The records stay in the DLQ
	// (topics are append-only), so a later redrive with the same filter
	// would send them again; pass StartedAt as Filter.Since to consider
	// only records that failed after this redrive began (those include any
	// re-driven record that failed again, and may include records that
	// failed earlier in that same second).
	StartedAt time.Time
}

// Redrive re-publishes the DLQ records that match req.Filter to their
// dlq.source.topic with the original key, value and non-dlq headers, and
// with dlq.redrive_count set to one more than before (all other dlq.*
// headers are dropped), stamped with the time of the redrive (see
// redriven for why not the original's). A record goes back to
// the partition it came from (dlq.source.partition) when that partition
// exists, so a key keeps its partition and its order; otherwise the key is
// hashed. Records whose
// redrive count reached req.MaxRedrives are refused, stubs of records
// that were too large for the DLQ (dlq.value_omitted) are skipped, and so
// are records whose source topic does not exist (deleted since; they count
// as Unroutable, with DryRun too): one missing topic does not stop the
// redrive of the others. Whether a topic exists is asked once per topic
// and run. A source record is sent at most once per run: a
// dead letter with the source coordinates and redrive count of one
// already sent is a Duplicate (dead letters without source coordinates
// are never duplicates). Records are produced
// synchronously in batches, in DLQ partition order; on a produce error
// Redrive stops and returns the counts so far with the error.
//
// The DLQ is read from its start up to the end captured at the call, as
// [Inspect] does. When no record arrives for a while before every DLQ
// partition reached that end (a broker not answering), Redrive sends the
// records it read and decided to send so far and then fails naming the
// partitions left short; the result counts what it did. Nothing is deleted
// from the DLQ.
func Redrive(ctx context.Context, opts []kgo.Opt, req RedriveRequest) (RedriveResult, error) {
	res := RedriveResult{StartedAt: time.Now().UTC().Truncate(time.Second)}
	if req.DLQTopic == "" {
		return res, errors.New("dlq redrive: no DLQ topic")
	}
	limit := req.MaxRedrives
	if limit <= 0 {
		limit = DefaultMaxRedrives
	}
	var prod *kgo.Client
	if !req.DryRun {
		var err error
		prod, err = kgo.NewClient(append(opts[:len(opts):len(opts)], kgo.RecordPartitioner(sourcePartitioner()))...)
		if err != nil {
			return res, fmt.Errorf("dlq redrive: kafka producer: %w", err)
		}
		defer prod.Close()
	}
	metaCl, err := kgo.NewClient(opts...)
	if err != nil {
		return res, fmt.Errorf("dlq redrive: kafka client: %w", err)
	}
	defer metaCl.Close()
	adm := kadm.NewClient(metaCl)
	found := map[string]bool{}
	exists := func(topic string) (bool, error) {
		if ok, asked := found[topic]; asked {
			return ok, nil
		}
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return false, fmt.Errorf("describe source topic %s: %w", topic, err)
		}
		d, ok := td[topic]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			found[topic] = false
		case d.Err != nil:
			return false, fmt.Errorf("describe source topic %s: %w", topic, d.Err)
		default:
			found[topic] = true
		}
		return found[topic], nil
	}
	// sent holds the source records sent (or, with DryRun, to be sent) so
	// far, by coordinates and redrive count.
	type sourceRecord struct {
		topic     string
		partition int32
		offset    int64
		redrives  int
	}
	sent := map[sourceRecord]bool{}
	var batch []*kgo.Record
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		results := prod.ProduceSync(ctx, batch...)
		batch = batch[:0]
		var err error
		for _, r := range results {
			if r.Err != nil {
				if err == nil {
					err = fmt.Errorf("produce to %s: %w", r.Record.Topic, r.Err)
				}
				continue
			}
			res.Sent++ // every acknowledged record counts, also after a failed one
		}
		return err
	}
	err = scan(ctx, opts, req.DLQTopic, func(kr *kgo.Record) error {
		res.Scanned++
		r, perr := Parse(kr)
		if !req.Filter.Match(r) {
			res.Filtered++
			return nil
		}
		d := Send
		switch {
		case r.SourceTopic == "":
			d = Unroutable
			res.Unroutable++
		case r.ValueOmitted != "":
			d = Omitted
			res.Omitted++
		case r.RedriveCount >= limit || (perr != nil && hasBadHeader(kr, stages.HeaderRedriveCount)):
			d = Refuse
			res.Refused++
		}
		src := sourceRecord{r.SourceTopic, r.SourcePartition, r.SourceOffset, r.RedriveCount}
		if d == Send && r.SourcePartition >= 0 && r.SourceOffset >= 0 && sent[src] {
			d = Duplicate
			res.Duplicates++
		}
		if d == Send {
			ok, err := exists(r.SourceTopic)
			if err != nil {
				return err
			}
			if !ok {
				d = Unroutable
				res.Unroutable++
			}
		}
		if req.Each != nil {
			req.Each(r, d)
		}
		if d != Send {
			return nil
		}
		if r.SourcePartition >= 0 && r.SourceOffset >= 0 {
			sent[src] = true
		}
		if req.DryRun {
			res.Sent++
			return nil
		}
		batch = append(batch, redriven(r))
		if len(batch) >= redriveBatch {
			return flush()
		}
		return nil
	})
	if (err == nil || errors.Is(err, errIncomplete)) && !req.DryRun {
		// An incomplete scan still sends what it read and decided to send,
		// so that the result matches the records Each saw.
		err = errors.Join(err, flush())
	}
	if err != nil {
		return res, fmt.Errorf("dlq redrive %s: %w", req.DLQTopic, err)
	}
	return res, nil
}

// redriven builds the record to re-publish: source topic, original key and
// value, non-dlq headers, incremented redrive count, source partition or -1,
// and the origin header (stages.HeaderOrigin: the source coordinates, unless
// the record carries one from an earlier redrive).
// The producer stamps it with the time of the redrive, not the original
// timestamp (dlq.source.timestamp): time-based retention of the source
// topic would otherwise delete a re-driven record older than retention.ms
// as soon as its segment holds nothing newer, possibly before it was
// consumed.
func redriven(r Record) *kgo.Record {
	out := &kgo.Record{Topic: r.SourceTopic, Key: r.Key, Value: r.Value, Partition: r.SourcePartition}
	origin := false
	for _, h := range r.Headers {
		if !strings.HasPrefix(h.Key, "dlq.") {
			out.Headers = append(out.Headers, h)
			origin = origin || h.Key == stages.HeaderOrigin
		}
	}
	if !origin && r.SourceTopic != "" && r.SourceOffset >= 0 {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: stages.HeaderOrigin,
			Value: []byte(stages.Origin(r.SourceTopic, r.SourcePartition, r.SourceOffset))})
	}
	out.Headers = append(out.Headers, kgo.RecordHeader{Key: stages.HeaderRedriveCount, Value: []byte(strconv.Itoa(r.RedriveCount + 1))})
	return out
}

// hasBadHeader reports whether kr's header key fails to parse as a
// non-negative integer.
func hasBadHeader(kr *kgo.Record, key string) bool {
	for _, h := range kr.Headers {
		if h.Key == key {
			if n, err := strconv.Atoi(strings.TrimSpace(string(h.Value))); err != nil || n < 0 {
				return true
			}
		}
	}
	return false
}

// sourcePartitioner sends a record to its Partition field when that is a
// valid partition and hashes its key (Kafka's murmur2, as the Java client
// does) otherwise.
func sourcePartitioner() kgo.Partitioner {
	return kgo.BasicConsistentPartitioner(func(topic string) func(*kgo.Record, int) int {
		hash := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
		return func(r *kgo.Record, n int) int {
			if r.Partition >= 0 && int(r.Partition) < n {
				return int(r.Partition)
			}
			return hash.Partition(r, n)
		}
	})
}
