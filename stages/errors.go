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
)

// Error is a classified stage or sink error. Build one with [DeadLetter],
// [Retry], [RetryAfter] or [Fatal]; inspect one with [Classify].
type Error struct {
	Kind   Kind
	Reason Reason        // for KindDeadLetter
	Rule   string        // rule id, empty when no rule applies
	After  time.Duration // for KindRetry: minimum wait before the next attempt (0: backoff policy)
	Err    error
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
	default:
		return fmt.Sprintf("retry: %v", e.Err)
	}
}

func (e *Error) Unwrap() error { return e.Err }

// DeadLetter classifies err as permanent: the record goes to the DLQ with the
// given reason and rule id (empty when no rule applies).
func DeadLetter(reason Reason, rule string, err error) error {
	if err == nil {
		err = errors.New(string(reason))
	}
	return &Error{Kind: KindDeadLetter, Reason: reason, Rule: rule, Err: err}
}

// Retry classifies err as transient: the record is retried later.
func Retry(err error) error { return &Error{Kind: KindRetry, Err: err} }

// RetryAfter classifies err as transient with a minimum wait, for example the
// wait a rate limiter computed. The runtime pauses the partition's fetches for
// at least d instead of sleeping in the poll loop.
func RetryAfter(d time.Duration, err error) error {
	return &Error{Kind: KindRetry, After: d, Err: err}
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
