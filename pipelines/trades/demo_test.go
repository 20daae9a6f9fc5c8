package trades_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/pipelines/trades"
)

// DemoStart keeps the demo's two series (the synthetic import's burst of
// 12 trades 4 minutes apart and the push's DemoSpan) in the past and in
// one ISO week, also in the first hour of a Monday, so that one
// digest.request per user covers all of its trades.
func TestDemoStart(t *testing.T) {
	t.Parallel()
	const burst = 44 * time.Minute // the synthetic broker's 12 trades
	for _, now := range []string{
		"2026-11-26T08:30:00Z", // a Thursday
		"2026-11-23T00:10:00Z", // 10 minutes into a Monday
		"2026-11-23T00:49:00Z",
		"2026-11-23T01:00:00Z",
		"2026-11-22T23:59:59Z", // the Sunday before
	} {
		n, err := time.Parse(time.RFC3339, now)
		if err != nil {
			t.Fatal(err)
		}
		start := trades.DemoStart(n)
		last := start.Add(max(burst, trades.DemoSpan))
		if w := trades.WeekOf(start); !w.Contains(start) || !w.Contains(last) {
			t.Errorf("now %s: start %s and last trade %s not in one week %v", now, start, last, w.Period())
		}
		if last.After(n) {
			t.Errorf("now %s: last trade %s is in the future", now, last)
		}
		if n.Sub(start) > 2*time.Hour {
			t.Errorf("now %s: start %s is more than 2h ago", now, start)
		}
	}
}
