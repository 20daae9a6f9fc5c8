package stages_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

func TestRetryAfterHeader(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"30":                            30 * time.Second,
		" 2 ":                           2 * time.Second,
		"-3":                            0,
		"soon":                          0,
		"999999999999":                  24 * time.Hour,
		"Sat, 01 Mar 2025 12:01:00 GMT": time.Minute,
		"Sat, 01 Mar 2025 11:00:00 GMT": 0,
	} {
		if got := stages.ParseRetryAfter(v, now); got != want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}
