package ratelimit

import (
	"time"

	"github.com/sluicehq/sluice/stages"
)

// StageWithClock is Stage with the clock of its denial streaks injected;
// size returns the number of accounts whose streak the stage remembers.
func StageWithClock[In, Out any](l *Limiter, key KeyFunc[In], b Backoff, next stages.Func[In, Out], now func() time.Time) (st stages.Func[In, Out], size func() int) {
	st, s := stage(l, key, b, next, now)
	return st, s.size
}

// ForgetAfter exposes forgetAfter.
func ForgetAfter(l *Limiter, b Backoff) time.Duration { return forgetAfter(l, b) }
