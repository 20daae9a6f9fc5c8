package stages

import (
	"context"
	"fmt"
	"strings"
)

// Sink writes batches of pipeline outputs. Contract:
//
//   - Write is called by one partition worker at a time per sink instance
//     unless the sink documents otherwise; the runtime shares one sink between
//     the workers of all partitions, so implementations must be safe for
//     concurrent use.
//   - Items are in partition order. A sink must be idempotent: writing the same
//     item twice (after a redelivery) leaves the same state as writing it once.
//     A sink whose effect is not idempotent must instead store the batch's
//     [Position] (see [PositionOf]) in the same transaction as its effects and
//     be the runner's offset store (run.WithOffsetStore), as pgsink does with
//     pgsink.WithOffsets.
//   - A nil error means every item is durable. The runtime commits offsets only
//     after that.
//   - A [*Rejections] error names the items the backend refused permanently;
//     the runtime dead-letters their source records and treats the rest of
//     the batch as written. dlq.reason is sink_rejected unless a rejection's
//     error is classified as a [DeadLetter] with one of the design's reasons,
//     which is then kept (with its rule when the rejection names none).
//   - A [Fatal] error stops the runner without committing the batch.
//   - Any other error is transient: the runtime retries the whole batch with
//     backoff (at least a [RetryAfter] error's wait), never dead-letters it
//     and never commits past it.
type Sink[T any] interface {
	Write(ctx context.Context, batch []T) error
}

// SinkFunc adapts a function to [Sink].
type SinkFunc[T any] func(ctx context.Context, batch []T) error

// Write calls f.
func (f SinkFunc[T]) Write(ctx context.Context, batch []T) error { return f(ctx, batch) }

// Rejection is one item a sink refused permanently.
type Rejection struct {
	Index int    // index of the item in the batch passed to Write
	Rule  string // optional rule id or constraint name
	Err   error
}

// Rejections is returned by a sink whose batch landed except for the listed
// items.
type Rejections struct {
	Items []Rejection
}

func (r *Rejections) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d item(s) rejected", len(r.Items))
	for i, it := range r.Items {
		if i == 3 {
			b.WriteString("; …")
			break
		}
		fmt.Fprintf(&b, "; #%d: %v", it.Index, it.Err)
	}
	return b.String()
}
