package modules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// ModuleSource fetches the current upstream data of one ticker × module
// (the Unusual Whales adapter, UW; the deterministic Synthetic source by
// default). Implementations are safe for concurrent use, honour ctx, and
// report an upstream's HTTP error answer as an *UpstreamError and a module
// they do not serve as an error wrapping ErrUnsupportedModule; the caller
// bounds each call with UpstreamTimeout and classifies failures with
// ClassifyUpstreamError.
type ModuleSource interface {
	Fetch(ctx context.Context, ticker, module string) (Snapshot, error)
}

// Snapshot is one upstream answer: its JSON payload and the date the data
// is of (YYYY-MM-DD; empty for intraday data).
type Snapshot struct {
	Payload  json.RawMessage
	DataDate string
}

// The upstream call policy of the refresh service.
const (
	// UpstreamTimeout bounds one upstream call.
	UpstreamTimeout = 30 * time.Second
	// UpstreamAttempts is how many times a timeout, 5xx or network
	// failure is tried before the request is dead-lettered
	// (retries_exhausted, modules.upstream) and the state turns error.
	UpstreamAttempts = 5
	// UpstreamBackoff is the first retry's backoff, doubled per attempt
	// up to UpstreamBackoffMax.
	UpstreamBackoff    = time.Second
	UpstreamBackoffMax = 30 * time.Second
	// DefaultRateLimitWait is the wait after a 429 without Retry-After.
	DefaultRateLimitWait = time.Second
)

// Errors a source wraps; ClassifyUpstreamError makes them permanent.
var (
	// ErrUnsupportedModule: the source does not serve the module.
	ErrUnsupportedModule = errors.New("module not served by this source")
	// ErrPayloadTooLarge: the answer exceeds MaxPayloadBytes
	// (modules.snapshot_too_large).
	ErrPayloadTooLarge = errors.New("upstream payload too large")
	// ErrInvalidPayload: a successful answer that is not JSON
	// (modules.upstream_rejected).
	ErrInvalidPayload = errors.New("upstream payload is not JSON")
)

// UpstreamError is an upstream's HTTP error answer. RetryAfter is its
// Retry-After (0 when absent); Message is a short excerpt of its body.
type UpstreamError struct {
	Status     int
	RetryAfter time.Duration
	Message    string
}

func (e *UpstreamError) Error() string {
	s := fmt.Sprintf("upstream answered HTTP %d", e.Status)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// ClassifyUpstreamError says what the runtime does with a failed fetch:
// 401 and 403 are fatal (the credentials are wrong for every key); 429 is a
// wait that spends no attempt, of Retry-After or DefaultRateLimitWait;
// another 4xx, an unsupported module or a payload that is not JSON is
// modules.upstream_rejected and a payload over MaxPayloadBytes
// modules.snapshot_too_large (permanent); anything else (5xx, timeouts,
// network) is retried with rule modules.upstream. A cancelled ctx's error
// is returned unchanged.
func ClassifyUpstreamError(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	switch {
	case errors.Is(err, ErrUnsupportedModule), errors.Is(err, ErrInvalidPayload):
		return UpstreamRejected(err)
	case errors.Is(err, ErrPayloadTooLarge):
		return stages.DeadLetter(stages.ReasonSanityFail, RuleSnapshotTooLarge, err)
	}
	var ue *UpstreamError
	if errors.As(err, &ue) {
		switch {
		case ue.Status == 401 || ue.Status == 403:
			return stages.Fatal(err)
		case ue.Status == 429:
			wait := ue.RetryAfter
			if wait <= 0 {
				wait = DefaultRateLimitWait
			}
			return stages.Wait(wait, err)
		case ue.Status >= 400 && ue.Status < 500:
			return UpstreamRejected(err)
		}
	}
	return UpstreamFailed(err)
}

// UpstreamResult is the result label of sluice_modules_upstream_calls_total
// for a fetch's error: ok, rate_limited (429), rejected (a permanent
// refusal, 401 and 403 included, or an unusable payload) or transient.
func UpstreamResult(err error) string {
	if err == nil {
		return "ok"
	}
	var ue *UpstreamError
	switch {
	case errors.As(err, &ue) && ue.Status == 429:
		return "rate_limited"
	case errors.Is(err, ErrUnsupportedModule), errors.Is(err, ErrInvalidPayload), errors.Is(err, ErrPayloadTooLarge),
		errors.As(err, &ue) && ue.Status >= 400 && ue.Status < 500:
		return "rejected"
	}
	return "transient"
}
