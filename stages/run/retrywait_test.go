package run

import (
	"testing"
	"time"
)

// retryWait is the backoff unless the error asked for longer, and caps
// what it asked for at maxRetryAfter.
func TestRetryWait(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{MaxAttempts: 5, Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond, Jitter: 0.2}
	for _, tc := range []struct {
		name     string
		attempt  int
		after    time.Duration
		min, max time.Duration
	}{
		{"no wait asked: backoff", 1, 0, 8 * time.Millisecond, 12 * time.Millisecond},
		{"wait below the backoff", 3, time.Millisecond, 32 * time.Millisecond, 48 * time.Millisecond},
		{"wait above the backoff", 1, 2 * time.Second, 2 * time.Second, 2 * time.Second},
		{"wait above the cap", 1, 24 * time.Hour, maxRetryAfter, maxRetryAfter},
	} {
		for range 20 {
			if got := retryWait(p, tc.attempt, tc.after); got < tc.min || got > tc.max {
				t.Fatalf("%s: retryWait(attempt %d, after %v) = %v, want within [%v, %v]", tc.name, tc.attempt, tc.after, got, tc.min, tc.max)
			}
		}
	}
}
