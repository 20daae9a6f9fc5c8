package stages

import (
	"errors"
	"fmt"
	"time"
)

// Reason is the value of the dlq.reason header.
type Reason string

// The dlq.reason values (the DLQ header contract, docs/dead-letters.md).
const (
	ReasonSanityFail       Reason = "sanity_fail"
	ReasonDecodeError      Reason = "decode_error"
	ReasonUnknownTaskType  Reason = "unknown_task_type"
	ReasonSinkRejected     Reason = "sink_rejected"
	ReasonRetriesExhausted Reason = "retries_exhausted"
	ReasonException        Reason = "exception"
)

// Kind says what the runtime does with an error returned by a stage or sink.
type Kind int

const (
	// KindRetry retries the record with exponential backoff and jitter, up to
	// the configured attempts, then dead-letters it as retries_exhausted.
	KindRetry Kind = iota
	// KindDeadLetter sends the record to the DLQ at once.
	KindDeadLetter
	// KindFatal stops the runner without committing the record.
	KindFatal
	// KindWait calls the stage again with the same message after the
	// error's wait, without spending an attempt: the record is never
	// dead-lettered for it (see [Wait]).
	KindWait
)

// Error is a classified stage or sink error. Build one with [DeadLetter],
// [DeadLetterWith], [Retry], [RetryAfter], [Wait] or [Fatal]; inspect one
// with [Classify].
type Error struct {
	Kind   Kind
	Reason Reason // for KindDeadLetter
	Rule   string // rule id, empty when no rule applies
	// After is, for KindRetry, the minimum wait before the next attempt (0:
	// the backoff policy) and, for KindWait, the wait.
	After time.Duration
	// WithOutputs, for KindDeadLetter, says that the outputs the stage
	// returned with the error are written as well (see [DeadLetterWith]).
	WithOutputs bool
	Err         error
}

func (e *Error) Error() string {
	switch e.Kind {
	case KindDeadLetter:
		if e.Rule != "" {
			return fmt.Sprintf("dead-letter %s (rule %s): %v", e.Reason, e.Rule, e.Err)
		}
		return fmt.Sprintf("dead-letter %s: %v", e.Reason, e.Err)
	case KindFatal:
		return fmt.Sprintf("fatal: %v", e.Err)
	case KindWait:
		return fmt.Sprintf("wait %s: %v", e.After, e.Err)
	default:
		return fmt.Sprintf("retry: %v", e.Err)
	}
}

func (e *Error) Unwrap() error { return e.Err }

// DeadLetter classifies err as permanent: the record goes to the DLQ with the
// given reason and rule id (empty when no rule applies).
func DeadLetter(reason Reason, rule string, err error) error { return deadLetter(reason, rule, err) }

func deadLetter(reason Reason, rule string, err error) *Error {
	if err == nil {
		err = errors.New(string(reason))
	}
	return &Error{Kind: KindDeadLetter, Reason: reason, Rule: rule, Err: err}
}

// DeadLetterWith dead-letters the record, like [DeadLetter], and still
// emits outs: a stage returns its result directly,
//
//	return stages.DeadLetterWith(outs, stages.ReasonRetriesExhausted, "", err)
//
// The runtime writes outs with the batch's other outputs and produces the
// record's dead letter (the original record, with the DLQ headers, counted
// in the DLQ metrics) before it commits the record's offset. Use it when a
// failure still has effects downstream, for example a job state that moves
// to FAILED or an "item finished with an error" event. A stage that returns
// outputs with a plain [DeadLetter] error emits nothing.
func DeadLetterWith[Out any](outs []Out, reason Reason, rule string, err error) ([]Out, error) {
	e := deadLetter(reason, rule, err)
	e.WithOutputs = true
	return outs, e
}

// Retry classifies err as transient: the record is retried later.
func Retry(err error) error { return &Error{Kind: KindRetry, Err: err} }

// RetryAfter classifies err as transient with a minimum wait, for example the
// wait a rate limiter computed. The runtime pauses the partition's fetches for
// at least d instead of sleeping in the poll loop.
func RetryAfter(d time.Duration, err error) error {
	return &Error{Kind: KindRetry, After: d, Err: err}
}

// Wait asks the runtime to call the stage again with the same message
// after d, without spending an attempt: for a condition that is not a
// failure of the record, such as a rate-limit denial or an HTTP 429 with a
// Retry-After. The runtime pauses only the record's partition meanwhile
// (its other partitions keep flowing), calls the stage again with the same
// [Msg.Attempt], never dead-letters the record for waiting, ends the wait
// early when the partition is revoked or the runner stops (the record is
// then left for redelivery) and caps d like a [RetryAfter] wait (at least
// 10ms, at most 5 minutes). A record that keeps waiting holds its
// partition: a stage bounds its own waits when that matters. A sink that
// returns a Wait is retried like with [RetryAfter].
func Wait(d time.Duration, err error) error {
	return &Error{Kind: KindWait, After: d, Err: err}
}

// Fatal classifies err as unrecoverable: the runner stops, the record is not
// committed and is delivered again when the pipeline restarts.
func Fatal(err error) error { return &Error{Kind: KindFatal, Err: err} }

// Classify returns the classification of err. Unclassified errors are
// KindRetry; a nil error returns nil.
func Classify(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Kind: KindRetry, Err: err}
}
