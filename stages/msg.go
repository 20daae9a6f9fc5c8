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
}

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
// Errors are interpreted by the runtime; see [DeadLetter], [Retry],
// [RetryAfter] and [Fatal]. Any other error is treated as a retryable
// failure (see [Classify]).
type Func[In, Out any] func(ctx context.Context, m Msg[In]) ([]Out, error)

// Decoder turns the raw key and value of a Kafka record into the typed value a
// pipeline's first stage consumes. A decoder error dead-letters the record
// with reason [ReasonDecodeError] unless the error already carries a
// dead-letter classification (for example [ReasonUnknownTaskType]).
type Decoder[T any] func(key, value []byte) (T, error)

// Then composes two stages: every output of first is fed to second, in order.
// The first error stops the chain and is returned unchanged.
func Then[A, B, C any](first Func[A, B], second Func[B, C]) Func[A, C] {
	return func(ctx context.Context, m Msg[A]) ([]C, error) {
		mids, err := first(ctx, m)
		if err != nil {
			return nil, err
		}
		var out []C
		for _, mid := range mids {
			next := Msg[B]{Key: m.Key, Value: mid, Headers: m.Headers, Source: m.Source}
			cs, err := second(ctx, next)
			if err != nil {
				return nil, err
			}
			out = append(out, cs...)
		}
		return out, nil
	}
}

// Map lifts a pure function into a stage with exactly one output per input.
func Map[In, Out any](f func(In) Out) Func[In, Out] {
	return func(_ context.Context, m Msg[In]) ([]Out, error) {
		return []Out{f(m.Value)}, nil
	}
}
