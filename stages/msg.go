package stages

import (
	"context"
	"time"
)

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Source locates the Kafka record a message came from.
type Source struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
}

// Msg is one decoded record as a stage sees it. Key and the raw value bytes of
// the original record are kept so that the runtime can dead-letter the
// original bytes unchanged.
type Msg[T any] struct {
	Key     string
	Value   T
	Headers []Header
	Source  Source
	// Attempt is the number of the stage call for this record, 1 on the
	// first; the runtime sets it on every call. A retry ([Retry],
	// [RetryAfter], any unclassified error) increments it; a [Wait] does
	// not. It starts at 1 again when the record is redelivered (after a
	// crash or a rebalance).
	Attempt int
	// MaxAttempts is the runtime's bound on Attempt (its retry policy): a
	// retry error returned at Attempt == MaxAttempts dead-letters the
	// record as retries_exhausted. 0 when unknown (a Msg the runtime did
	// not build). See [Msg.LastAttempt].
	MaxAttempts int
	// PrevErr is the error the stage returned at its previous call for
	// this record (a retry or a [Wait]); nil at the first call, and again
	// after a redelivery. A stage that makes partial progress it need not
	// redo (the parts of a job that succeeded) can carry it to its next
	// attempt in its error type and find it here with errors.As; the
	// runtime keeps nothing else between attempts.
	PrevErr error
}

// LastAttempt reports whether this call is the record's last attempt: a
// retry error now dead-letters it. A stage that must leave a trace of the
// failure besides the dead letter (a job state set to FAILED, say) checks
// it and returns [DeadLetterWith] instead of a retry error. False when
// MaxAttempts is unknown (0).
func (m Msg[T]) LastAttempt() bool { return m.MaxAttempts > 0 && m.Attempt >= m.MaxAttempts }

// Header returns the value of the last header named key, and whether it exists.
func (m Msg[T]) Header(key string) ([]byte, bool) {
	for i := len(m.Headers) - 1; i >= 0; i-- {
		if m.Headers[i].Key == key {
			return m.Headers[i].Value, true
		}
	}
	return nil, false
}

// Func is a stage: it turns one input message into zero, one or many outputs.
// A nil slice with a nil error drops the record (its offset still commits).
// Errors are interpreted by the runtime; see [DeadLetter], [DeadLetterWith],
// [Retry], [RetryAfter], [Wait] and [Fatal]. Any other error is treated as a
// retryable failure (see [Classify]). Outputs returned with an error are
// ignored, except with [DeadLetterWith].
type Func[In, Out any] func(ctx context.Context, m Msg[In]) ([]Out, error)

// Decoder turns the raw key and value of a Kafka record into the typed value a
// pipeline's first stage consumes. A decoder error dead-letters the record
// with reason [ReasonDecodeError] unless the error already carries a
// dead-letter classification (for example [ReasonUnknownTaskType]).
type Decoder[T any] func(key, value []byte) (T, error)

// Then composes two stages: every output of first is fed to second, in
// order, with m's key, headers, source, attempt and previous error. The first error stops
// the chain and is returned unchanged. A [DeadLetterWith] error keeps the
// outputs produced until then: second's outputs of first's outputs (a
// DeadLetterWith of first still feeds its outputs to second) and, for one of
// second, its own outputs.
func Then[A, B, C any](first Func[A, B], second Func[B, C]) Func[A, C] {
	return func(ctx context.Context, m Msg[A]) ([]C, error) {
		mids, ferr := first(ctx, m)
		if ferr != nil && !withOutputs(ferr) {
			return nil, ferr
		}
		var out []C
		for _, mid := range mids {
			next := Msg[B]{Key: m.Key, Value: mid, Headers: m.Headers, Source: m.Source, Attempt: m.Attempt, MaxAttempts: m.MaxAttempts, PrevErr: m.PrevErr}
			cs, err := second(ctx, next)
			if err != nil {
				if withOutputs(err) {
					return append(out, cs...), err
				}
				return nil, err
			}
			out = append(out, cs...)
		}
		return out, ferr
	}
}

// withOutputs reports whether err is a [DeadLetterWith] error.
func withOutputs(err error) bool {
	c := Classify(err)
	return c.Kind == KindDeadLetter && c.WithOutputs
}

// Map lifts a pure function into a stage with exactly one output per input.
func Map[In, Out any](f func(In) Out) Func[In, Out] {
	return func(_ context.Context, m Msg[In]) ([]Out, error) {
		return []Out{f(m.Value)}, nil
	}
}
