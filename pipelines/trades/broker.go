package trades

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// BrokerAdapter fetches a user's trades from a broker, one page a call.
// Implementations return raw trades unvalidated (Normalize checks them),
// keep no cursor of their own (the caller passes the previous page's Next)
// and report failures as *BrokerError when the broker answered. They are
// safe for concurrent use.
type BrokerAdapter interface {
	FetchTrades(ctx context.Context, req FetchRequest) (Page, error)
}

// FetchRequest asks for one page of a user's trades since Since.
type FetchRequest struct {
	UserID      string
	AccessToken string // opened from broker_connections; empty for synthetic
	Since       time.Time
	Cursor      string // the previous page's Next; empty for the first page
	// ImportID and Options concern the synthetic broker only: its faults
	// are counted per import and page, and shaped by the import's options.
	ImportID string
	Options  *SyntheticOptions
}

// Page is one page of trades. Next is empty on the last page. Percent is
// the broker's own progress (nil when it gives none: see EstimatePercent).
// RateLimit, when set, is the broker's remaining budget: at Remaining 0 the
// next page waits Reset (plus the safety margin).
type Page struct {
	Trades    []RawTrade
	Next      string
	Percent   *int
	RateLimit *RateLimit
}

// RateLimit is a broker's request budget after a page.
type RateLimit struct {
	Remaining int
	Reset     time.Duration
}

// BrokerError is a broker's HTTP error answer. RetryAfter is its
// Retry-After (0 when absent).
type BrokerError struct {
	Status     int
	RetryAfter time.Duration
}

func (e *BrokerError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("broker answered HTTP %d (retry after %s)", e.Status, e.RetryAfter)
	}
	return fmt.Sprintf("broker answered HTTP %d", e.Status)
}

// ClassifyFetchError says what the runtime does with a failed fetch:
// 401 and 403 are permanent (sanity_fail, trades.broker_auth); 429 is a
// wait that spends no attempt (stages.Wait) of Retry-After, else the
// page's last known reset, plus safety (BROKER_RATE_LIMIT_SAFETY_MS) — the
// caller bounds the total a page may wait; anything else (5xx, network,
// timeouts) is retried with backoff, with rule trades.broker_fetch, so an
// import whose retries run out is dead-lettered as retries_exhausted with
// that rule. A cancelled ctx's error is returned unchanged.
func ClassifyFetchError(err error, reset, safety time.Duration) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	var be *BrokerError
	if errors.As(err, &be) {
		switch be.Status {
		case 401, 403:
			return stages.DeadLetter(stages.ReasonSanityFail, RuleBrokerAuth, err)
		case 429:
			wait := be.RetryAfter
			if wait <= 0 {
				wait = reset
			}
			return stages.Wait(wait+safety, err)
		}
	}
	return &stages.Error{Kind: stages.KindRetry, Rule: RuleBrokerFetch, Err: err}
}

// EstimatePercent is an import's progress after page (1-based) when the
// broker gives none: 100 on the last page, else round(100·page/(page+1)).
func EstimatePercent(page int, last bool) int {
	if last {
		return 100
	}
	return int(math.Round(100 * float64(page) / float64(page+1)))
}
