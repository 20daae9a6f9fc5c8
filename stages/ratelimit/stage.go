package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// ErrDenied is wrapped by the error a limited stage returns when it did
// not get a grant: the limit was reached, or the limiter could not be asked
// (then ErrUnavailable is wrapped too). Either way the message waits and is
// tried again; it is not a failure of the message.
var ErrDenied = errors.New("rate limited")

// ErrUnavailable is wrapped (with ErrDenied and the Redis error) by the
// error a limited stage returns when the limiter failed (Redis down,
// restarting, unreachable): the stage fails closed and grants nothing.
var ErrUnavailable = errors.New("rate limiter unavailable")

// Backoff shapes the wait a stage asks for after a denial: the limiter's
// computed wait plus a random extra of up to min(Initial·2^(n−1), Max),
// where n counts the key's consecutive denials ("full jitter" on top of the
// exact wait). The extra spreads callers that were denied together and grows
// while a key keeps being denied; the wait is never shorter than the
// limiter's.
type Backoff struct {
	// Initial is the extra of the first denial (default 50ms).
	Initial time.Duration
	// Max caps the extra (default 5s).
	Max time.Duration
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 50 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 5 * time.Second
	}
	return b
}

// Wait returns the wait after the n-th consecutive denial (n ≥ 1) when the
// limiter asked for limiterWait.
func (b Backoff) Wait(limiterWait time.Duration, n int) time.Duration {
	extra := b.extra(n)
	return limiterWait + time.Duration(rand.Int64N(int64(extra)+1))
}

// FailureWait returns the wait after the n-th consecutive limiter failure
// (n ≥ 1): between E and 2E, where E = min(Initial·2^(n−1), Max), so that
// callers retry a Redis that is down or restarting ever more slowly, never
// in a busy loop, and spread out.
func (b Backoff) FailureWait(n int) time.Duration {
	extra := b.extra(n)
	return extra + time.Duration(rand.Int64N(int64(extra)+1))
}

// extra returns min(Initial·2^(n−1), Max) with the defaults applied.
func (b Backoff) extra(n int) time.Duration {
	b = b.withDefaults()
	extra := b.Initial
	for i := 1; i < n && extra < b.Max; i++ {
		extra *= 2
	}
	return min(extra, b.Max)
}

// KeyFunc returns the account a message is limited under, or ok=false for
// messages that are not limited (they pass straight to the next stage).
type KeyFunc[In any] func(m stages.Msg[In]) (account string, ok bool)

// Stage wraps next so that every limited message first asks l for a grant.
// Granted: next runs. Denied: the stage returns stages.RetryAfter(wait,
// ErrDenied…) without calling next, where wait follows b (see Backoff); the
// runtime pauses the partition's fetches for at least wait and then calls
// the stage again with the same message (no sleep in the poll loop, no busy
// retry).
//
// A limiter failure (Redis down, restarting, unreachable) grants nothing
// either (the stage fails closed): the stage returns stages.RetryAfter(w,
// err) where err wraps ErrDenied, ErrUnavailable and the Redis error and w
// is b.FailureWait(n) for the n-th consecutive failure of the stage, so an
// outage is waited out like a denial, not counted as a failure of the
// message. When ctx has ended, the limiter's error is returned as a plain
// retryable error.
//
// Note that the runtime counts denials as attempts of the message
// (run.Config.Retry.MaxAttempts): a pipeline with a limited stage sets it
// high enough for its expected waits. The returned stage is safe for
// concurrent use.
func Stage[In, Out any](l *Limiter, key KeyFunc[In], b Backoff, next stages.Func[In, Out]) stages.Func[In, Out] {
	var mu sync.Mutex
	denials := map[string]int{}
	failures := 0 // consecutive limiter failures, over all accounts
	return func(ctx context.Context, m stages.Msg[In]) ([]Out, error) {
		account, ok := key(m)
		if !ok {
			return next(ctx, m)
		}
		d, err := l.Allow(ctx, account)
		if err != nil {
			if ctx.Err() != nil {
				return nil, stages.Retry(err)
			}
			mu.Lock()
			failures++
			n := failures
			mu.Unlock()
			wait := b.FailureWait(n)
			return nil, stages.RetryAfter(wait, fmt.Errorf("%w: %w (failure %d, retry in %s): %w",
				ErrDenied, ErrUnavailable, n, wait.Round(time.Millisecond), err))
		}
		mu.Lock()
		failures = 0
		if d.Allowed {
			delete(denials, account)
			mu.Unlock()
			return next(ctx, m)
		}
		denials[account]++
		n := denials[account]
		mu.Unlock()
		wait := b.Wait(d.Wait, n)
		return nil, stages.RetryAfter(wait, fmt.Errorf("%w: %s/%s for %s (denial %d)", ErrDenied, l.cfg.Source, account, wait.Round(time.Millisecond), n))
	}
}
