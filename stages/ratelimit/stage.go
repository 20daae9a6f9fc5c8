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
	// Initial is the extra of the first denial (default 50ms, at most
	// MaxBackoff).
	Initial time.Duration
	// Max caps the extra (default 5s, at most MaxBackoff).
	Max time.Duration
}

// MaxBackoff is the largest Backoff.Initial or Backoff.Max honoured:
// larger values are capped to it (so the doubled extra, and the jitter on
// top of it, never overflow).
const MaxBackoff = time.Hour

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 50 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 5 * time.Second
	}
	b.Initial = min(b.Initial, MaxBackoff)
	b.Max = min(b.Max, MaxBackoff)
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
// Granted: next runs. Denied: the stage returns stages.Wait(wait,
// ErrDenied…) without calling next, where wait follows b (see Backoff); the
// runtime pauses the partition's fetches for wait and then calls the stage
// again with the same message and attempt number (no sleep in the poll
// loop, no busy retry, no attempt spent: a denial is not a failure of the
// message and never dead-letters it).
//
// A limiter failure (Redis down, restarting, unreachable) grants nothing
// either (the stage fails closed): the stage returns stages.Wait(w, err)
// where err wraps ErrDenied, ErrUnavailable and the Redis error and w is
// b.FailureWait(n) for the n-th consecutive failure of the stage, so an
// outage is waited out like a denial, however long it lasts, not counted as
// a failure of the message. When ctx has ended, the limiter's error is
// returned as a plain retryable error.
//
// The stage remembers, per account, the number of consecutive denials and
// the time of the last one. An account's streak ends when it is granted,
// and is also forgotten once the account has not been denied for longer
// than the stage's horizon, 2·(largest window + b.Max) and at least one
// minute: twice the longest wait the stage can ask for, so an account that
// keeps being retried keeps its streak (its backoff grows as described
// under Backoff), while accounts that stop being retried (their messages
// dead-lettered, their partitions revoked, their jobs ended) do not stay in
// memory. Forgotten streaks are swept under the stage's lock during calls,
// at most once per half horizon, so memory is bounded by the accounts
// denied within the last 1.5 horizons; an account that comes back after
// being forgotten starts a new streak.
//
// The runtime's waits are capped (5 minutes in stages/run): a wait the
// limiter computed beyond that is asked for again when the message is
// tried again. The returned stage is safe for concurrent use.
func Stage[In, Out any](l *Limiter, key KeyFunc[In], b Backoff, next stages.Func[In, Out]) stages.Func[In, Out] {
	st, _ := stage(l, key, b, next, time.Now)
	return st
}

// forgetAfter returns the horizon after which a stage built with l and b
// forgets an account's denial streak: 2·(largest window of l + b.Max, with
// the defaults applied), at least one minute. A denied account is asked to
// wait at most the largest window (the limiter's wait) plus b.Max (the
// jitter), so a continuously retried account is never idle that long.
func forgetAfter(l *Limiter, b Backoff) time.Duration {
	var largest time.Duration
	for _, w := range l.cfg.Windows {
		largest = max(largest, w.Size)
	}
	return max(2*(largest+b.withDefaults().Max), time.Minute)
}

// denial is an account's streak of consecutive denials.
type denial struct {
	n    int       // consecutive denials
	last time.Time // time of the last one (the stage's clock)
}

// streaks holds a stage's denial and failure streaks; now and horizon are
// set once, the other fields are guarded by mu.
type streaks struct {
	mu       sync.Mutex
	now      func() time.Time
	horizon  time.Duration
	denials  map[string]denial
	failures int       // consecutive limiter failures, over all accounts
	swept    time.Time // time of the last sweep
}

// sweepLocked drops the streaks of accounts not denied for longer than the
// horizon, when the last sweep is at least half a horizon old. s.mu must be
// held.
func (s *streaks) sweepLocked(now time.Time) {
	if now.Sub(s.swept) < s.horizon/2 {
		return
	}
	s.swept = now
	for account, d := range s.denials {
		if now.Sub(d.last) > s.horizon {
			delete(s.denials, account)
		}
	}
}

// size returns the number of accounts with a remembered denial streak.
func (s *streaks) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.denials)
}

// stage is Stage with the clock of the denial streaks injected (tests);
// it also returns the streaks.
func stage[In, Out any](l *Limiter, key KeyFunc[In], b Backoff, next stages.Func[In, Out], now func() time.Time) (stages.Func[In, Out], *streaks) {
	s := &streaks{now: now, horizon: forgetAfter(l, b), denials: map[string]denial{}}
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
			s.mu.Lock()
			s.failures++
			n := s.failures
			s.mu.Unlock()
			wait := b.FailureWait(n)
			return nil, stages.Wait(wait, fmt.Errorf("%w: %w (failure %d, retry in %s): %w",
				ErrDenied, ErrUnavailable, n, wait.Round(time.Millisecond), err))
		}
		s.mu.Lock()
		t := s.now()
		s.failures = 0
		s.sweepLocked(t)
		if d.Allowed {
			delete(s.denials, account)
			s.mu.Unlock()
			return next(ctx, m)
		}
		prev, seen := s.denials[account]
		if !seen || t.Sub(prev.last) > s.horizon {
			prev = denial{} // forgotten, swept or not yet: a new streak
		}
		n := prev.n + 1
		s.denials[account] = denial{n: n, last: t}
		s.mu.Unlock()
		wait := b.Wait(d.Wait, n)
		return nil, stages.Wait(wait, fmt.Errorf("%w: %s/%s for %s (denial %d)", ErrDenied, l.cfg.Source, account, wait.Round(time.Millisecond), n))
	}, s
}
