package run

import (
	"testing"
	"time"
)

// A stages.Wait is honoured as asked within [minWait, maxRetryAfter]: a
// zero or negative wait cannot spin a partition, a huge one cannot park
// it for longer than a RetryAfter could.
func TestWaitBounds(t *testing.T) {
	t.Parallel()
	for asked, want := range map[time.Duration]time.Duration{
		-time.Second:           minWait,
		0:                      minWait,
		time.Millisecond:       minWait,
		250 * time.Millisecond: 250 * time.Millisecond,
		2 * time.Minute:        2 * time.Minute,
		24 * time.Hour:         maxRetryAfter,
	} {
		if got := waitBounds(asked); got != want {
			t.Errorf("waitBounds(%v) = %v, want %v", asked, got, want)
		}
	}
}
