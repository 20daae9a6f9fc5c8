package modules

import (
	"testing"
	"time"
)

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	at1405 := time.Date(2025, 1, 6, 14, 5, 0, 0, time.UTC)
	want := "NVDA_ticker_activity_analysis_dark_pool,options_flow_2025-01-06T14"
	if got := IdempotencyKey("NVDA", JobTypeTickerActivity, []string{"options_flow", "dark_pool"}, at1405); got != want {
		t.Fatalf("key = %s, want %s", got, want)
	}
	paris := time.FixedZone("CET", 3600)
	for name, k := range map[string]string{
		"lower case":        IdempotencyKey("nvda", JobTypeTickerActivity, []string{"dark_pool", "options_flow"}, at1405),
		"repeated module":   IdempotencyKey("NVDA", JobTypeTickerActivity, []string{"options_flow", "dark_pool", "options_flow"}, at1405),
		"end of the hour":   IdempotencyKey("NVDA", JobTypeTickerActivity, []string{"dark_pool", "options_flow"}, at1405.Add(54*time.Minute+59*time.Second)),
		"another time zone": IdempotencyKey("Nvda", JobTypeTickerActivity, []string{"options_flow", "dark_pool"}, at1405.In(paris)),
	} {
		if k != want {
			t.Errorf("%s: %s", name, k)
		}
	}
	for name, k := range map[string]string{
		"next hour":      IdempotencyKey("NVDA", JobTypeTickerActivity, []string{"dark_pool", "options_flow"}, at1405.Add(55*time.Minute)),
		"other modules":  IdempotencyKey("NVDA", JobTypeTickerActivity, []string{"dark_pool"}, at1405),
		"other ticker":   IdempotencyKey("AAPL", JobTypeTickerActivity, []string{"dark_pool", "options_flow"}, at1405),
		"other job type": IdempotencyKey("NVDA", "other", []string{"dark_pool", "options_flow"}, at1405),
	} {
		if k == want {
			t.Errorf("%s shares the key", name)
		}
	}
	// The caller's slice is left alone.
	ms := []string{"options_flow", "dark_pool"}
	IdempotencyKey("NVDA", JobTypeTickerActivity, ms, at1405)
	if ms[0] != "options_flow" {
		t.Error("modules sorted in place")
	}
}
