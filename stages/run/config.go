package run

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Config holds the runtime settings of one pipeline. Zero fields take the
// defaults documented on each field; Validate reports invalid values.
type Config struct {
	// Name identifies the pipeline in metrics, logs and DLQ headers. Required.
	Name string
	// Group is the consumer group (default: Name).
	Group string
	// Topics are consumed. Required.
	Topics []string
	// DLQTopic receives dead-lettered records. Required unless NoDLQ.
	DLQTopic string
	// NoDLQ runs the pipeline without a DLQ topic (DLQTopic must be empty):
	// a record that would be dead-lettered (decode error, stage dead
	// letter or panic, exhausted retries, sink rejection) is a fatal error
	// instead, naming the record and the reason: Run returns it and the
	// record's offset is not committed, so it is processed again by the
	// next run. For a pipeline whose input is itself a DLQ (the DLQ
	// archiver), where a dead letter would loop back into its input or be
	// lost. Not supported by the transactional runner.
	NoDLQ bool
	// DLQCommit is how dead letters commit (the batch runner; the
	// transactional runner always commits them in its transactions):
	// DLQTransactional (default) produces the dead letters of the batches
	// (or windows) behind an offset commit in one Kafka transaction with
	// that commit, so a read_committed reader of the DLQ topic sees exactly
	// one dead letter per bad record across crashes, rebalances and broker
	// restarts; the runner's committer starts that commit as soon as it is
	// handed dead letters (a few round trips after their batch, or after
	// their window is written), and a member
	// killed mid-commit leaves a transaction open for up to 20s, which
	// holds back read_committed readers of the DLQ topic and the next
	// owner's start until the broker aborts it. DLQAtLeastOnce produces
	// them at the end of each batch, before its offsets are marked: a
	// crash, a rebalance or a broker outage before the commit dead-letters
	// the redelivered records again. Ignored with NoDLQ. The records of a
	// [Publisher] sink follow the same mode (see there).
	DLQCommit string
	// BatchMaxRecords bounds a batch by record count (default 500).
	BatchMaxRecords int
	// BatchMaxBytes bounds a batch by the sum of record value sizes (default 4 MiB).
	BatchMaxBytes int
	// BatchLinger is how long a worker waits for more records to fill a
	// batch once it has at least one (default 50ms).
	BatchLinger time.Duration
	// KeyConcurrency is how many records of one partition's batch the
	// stage handles at once, of different keys (default 1: one record
	// after the other). Records of one key keep their offset order and are
	// never handled concurrently, so a key's state store entry keeps a
	// single writer; a stage used with it must be safe for concurrent use
	// within a partition. Outputs, dead letters and the committed offset
	// stay in offset order: a batch commits up to its first record not
	// done, and grows by the records queued while its records run. For a
	// stage waiting on I/O (an upstream call) per record, where partitions
	// alone bound the calls in flight. Not supported by the transactional
	// runner.
	KeyConcurrency int
	// MaxInFlight bounds the records buffered per partition; above it, or
	// above the partition's share of the memory budget's records (see
	// [Budget]), the partition's fetches pause until the worker drained half
	// of them (default max(4 × BatchMaxRecords, 10000)). Keep it above the
	// records of one fetch (FetchMaxPartitionBytes, 1 MiB at most): kgo drops
	// and later re-fetches the buffered data of a paused partition, so a
	// bound below one fetch makes every fetch pause. It also bounds the
	// records of one poll, by which the budget may be overshot.
	MaxInFlight int
	// Retry is the stage retry policy (default 5 attempts, 100ms → 10s).
	// A stage error classified [stages.RetryAfter] waits at least the
	// error's wait (capped at 5 minutes) when that is longer than the
	// backoff.
	Retry RetryPolicy
	// SinkRetry is the backoff for transient sink and DLQ-produce failures;
	// its MaxAttempts is ignored: transient sink failures retry until they
	// succeed or the worker stops (default 200ms → 10s). A sink error
	// classified [stages.RetryAfter] (a rate limit, say) is retried after
	// the error's wait instead when that is longer than the backoff, capped
	// at 5 minutes; like the backoff, the wait pauses the partition's
	// fetches and ends early when the worker stops (shutdown, revocation).
	// The transactional runner waits as long before it polls again after a
	// failed produce (ending early when its context is cancelled).
	SinkRetry RetryPolicy
	// CommitInterval is the period of automatic commits of marked offsets
	// (default 1s).
	CommitInterval time.Duration
	// RevokeTimeout bounds how long a revoked or stopping worker may take to
	// finish its batch before it is abandoned (default 20s).
	RevokeTimeout time.Duration
	// StartOffset is where a partition starts when the group has no
	// committed offset for it, so it applies only before the group's first
	// commit of that partition: "earliest" (default: the log start) or
	// "latest" (the log end; records produced before the group first
	// consumed the partition are never processed).
	//
	// "latest" is resolved once, when a member of the group is assigned the
	// partition and finds no commit, and that end offset is committed for
	// the group then, before any record of the partition is processed (a
	// group commit fenced by the member's generation, so a member whose
	// generation went stale cannot make it; a partition with a commit is
	// never touched). A member that stops or loses the partition before its
	// own first commit (a crash, a shutdown while its sink is down, a
	// rebalance) thus leaves the next owner that start rather than the log
	// end of its own time: the records produced after the group started are
	// not skipped. "earliest" needs no such commit: an owner resolving it
	// again loses nothing.
	//
	// It never moves a partition that has a commit. A committed offset
	// below the log start (retention or DeleteRecords removed records the
	// group had not consumed) resumes at the log start with either value:
	// the deleted records are gone and reported (a WARN and
	// sluice_offsets_skipped_total), but no record still in the log is
	// skipped. A committed offset past the log end (the log was truncated)
	// also resumes at the log start. When the broker lost data at a point
	// the client cannot locate (kgo reports kgo.ErrDataLoss, logged as a
	// fetch error), the partition is re-read from the log start: nothing
	// is skipped, at the cost of duplicates the idempotent sinks absorb.
	StartOffset string
	// Window turns on coalescing windows across batches (off by default;
	// the sink must implement [Merger]). See [WindowConfig].
	Window WindowConfig
	// StopAtEnd makes Run a one-shot job: it stops by itself (as after a
	// cancel: batches finished, offsets committed, group left) and returns
	// nil once the group's backlog of when it started is processed. Run
	// first lists every input partition's end (its last stable offset when
	// the client reads with read_committed isolation, passed with
	// [WithKafkaOpts], else its high watermark) and the group's committed
	// offsets; the partitions the group has not committed up to their end
	// are pending (none: Run returns nil at once, without joining). It
	// stops when this member has committed or marked every pending
	// partition up to its end, or when no record arrived for StopIdle while
	// every record fetched was processed (another member of the group
	// holds the rest, or retention deleted it). A missing input topic is an
	// error. The client keeps transaction markers (control records; the
	// workers skip them and commit past them), so that a partition ending
	// with one reaches its end. Records produced after the start may be
	// processed too. Not supported by the transactional runner.
	StopAtEnd bool
	// StopIdle is StopAtEnd's idle limit (default 10s).
	StopIdle time.Duration
}

// RetryPolicy is exponential backoff with jitter.
type RetryPolicy struct {
	// MaxAttempts is the total number of attempts, the first included (default 5).
	MaxAttempts int
	// Initial is the first backoff (default 100ms).
	Initial time.Duration
	// Max caps the backoff (default 10s).
	Max time.Duration
	// Jitter is the random fraction added or removed, 0..1 (default 0.2).
	Jitter float64
}

func (p RetryPolicy) withDefaults(initial time.Duration) RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.Initial <= 0 {
		p.Initial = initial
	}
	if p.Max <= 0 {
		p.Max = 10 * time.Second
	}
	if p.Jitter <= 0 {
		p.Jitter = 0.2
	}
	return p
}

// Backoff returns the wait before attempt number attempt+1 (attempt ≥ 1).
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	d := p.Initial
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	if d > p.Max {
		d = p.Max
	}
	j := (rand.Float64()*2 - 1) * p.Jitter
	return time.Duration(float64(d) * (1 + j))
}

// offsetOpts returns the client options implementing StartOffset. kgo
// splits where a partition without a commit starts (ConsumeStartOffset)
// from where it resumes after OFFSET_OUT_OF_RANGE (ConsumeResetOffset); the
// reset offset also decides where a commit below the log start resumes, so
// it is the log start for both StartOffset values: with AtEnd (what a single
// ConsumeResetOffset(AtEnd) gave "latest") kgo jumps to the log end and
// silently skips every record still between the log start and the end.
func (c Config) offsetOpts() []kgo.Opt {
	start := kgo.NewOffset().AtStart()
	if c.StartOffset == "latest" {
		start = kgo.NewOffset().AtEnd()
	}
	return []kgo.Opt{kgo.ConsumeStartOffset(start), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Group == "" {
		c.Group = c.Name
	}
	if c.BatchMaxRecords <= 0 {
		c.BatchMaxRecords = 500
	}
	if c.BatchMaxBytes <= 0 {
		c.BatchMaxBytes = 4 << 20
	}
	if c.BatchLinger <= 0 {
		c.BatchLinger = 50 * time.Millisecond
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = max(4*c.BatchMaxRecords, 10000)
	}
	c.Retry = c.Retry.withDefaults(100 * time.Millisecond)
	c.SinkRetry = c.SinkRetry.withDefaults(200 * time.Millisecond)
	if c.CommitInterval <= 0 {
		c.CommitInterval = time.Second
	}
	if c.RevokeTimeout <= 0 {
		c.RevokeTimeout = 20 * time.Second
	}
	if c.StartOffset == "" {
		c.StartOffset = "earliest"
	}
	if c.StopIdle <= 0 {
		c.StopIdle = 10 * time.Second
	}
	if c.DLQCommit == "" {
		c.DLQCommit = DLQTransactional
	}
	if c.Window.MaxKeys > 0 && c.Window.MaxAge <= 0 {
		c.Window.MaxAge = 5 * time.Second
	}
	return c
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("pipeline name is required"))
	}
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("at least one topic is required"))
	}
	switch {
	case c.DLQTopic == "" && !c.NoDLQ:
		errs = append(errs, errors.New("a DLQ topic is required"))
	case c.DLQTopic != "" && c.NoDLQ:
		errs = append(errs, fmt.Errorf("DLQ topic %q set with NoDLQ", c.DLQTopic))
	}
	for _, t := range c.Topics {
		if t == c.DLQTopic && t != "" {
			errs = append(errs, fmt.Errorf("topic %q is both input and DLQ", t))
		}
	}
	switch c.StartOffset {
	case "", "earliest", "latest":
	default:
		errs = append(errs, fmt.Errorf("start offset %q: want earliest or latest", c.StartOffset))
	}
	switch c.DLQCommit {
	case "", DLQTransactional, DLQAtLeastOnce:
	default:
		errs = append(errs, fmt.Errorf("DLQ commit %q: want %s or %s", c.DLQCommit, DLQTransactional, DLQAtLeastOnce))
	}
	if c.Window.MaxKeys < 0 || c.Window.MaxAge < 0 || c.Window.MaxTotalKeys < 0 {
		errs = append(errs, errors.New("window bounds must not be negative"))
	}
	if c.KeyConcurrency < 0 {
		errs = append(errs, errors.New("key concurrency must not be negative"))
	}
	if c.Retry.Jitter > 1 || c.SinkRetry.Jitter > 1 {
		errs = append(errs, errors.New("retry jitter must be within 0..1"))
	}
	return errors.Join(errs...)
}
