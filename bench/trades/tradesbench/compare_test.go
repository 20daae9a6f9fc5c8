package main

import (
	"testing"
	"time"
)

// compareDigests accepts equal documents whatever their key order and
// spacing, and fails on a changed value, a missing digest and an extra one.
func TestCompareDigests(t *testing.T) {
	t.Parallel()
	want := map[string][]byte{
		"u1|2026-11-16": []byte(`{"user_id":"u1","period":{"start":"2026-11-16","end":"2026-11-23"},"agg":{"trades":3,"pnl":"1.50"}}`),
		"u2|2026-11-16": []byte(`{"user_id":"u2","period":{"start":"2026-11-16","end":"2026-11-23"},"agg":{"trades":0,"pnl":"0"}}`),
	}
	same := map[string][]byte{
		"u1|2026-11-16": []byte(`{"agg": {"pnl": "1.50", "trades": 3}, "period": {"end": "2026-11-23", "start": "2026-11-16"}, "user_id": "u1"}`),
		"u2|2026-11-16": want["u2|2026-11-16"],
	}
	if err := compareDigests(want, same, `"x":0`); err != nil {
		t.Fatalf("equal digests: %v", err)
	}
	for name, got := range map[string]map[string][]byte{
		"changed": {"u1|2026-11-16": []byte(`{"user_id":"u1","period":{"start":"2026-11-16","end":"2026-11-23"},"agg":{"trades":3,"pnl":"1.5"}}`),
			"u2|2026-11-16": want["u2|2026-11-16"]},
		"missing": {"u1|2026-11-16": want["u1|2026-11-16"]},
		"extra": {"u1|2026-11-16": want["u1|2026-11-16"], "u2|2026-11-16": want["u2|2026-11-16"],
			"u3|2026-11-16": want["u2|2026-11-16"]},
	} {
		if err := compareDigests(want, got, `"x":0`); err == nil {
			t.Errorf("%s digest: no error", name)
		}
	}
}

// pct is the nearest-rank percentile: p95 of 20 values is the 19th
// smallest, p100 the largest.
func TestPct(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 20; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[int]time.Duration{50: 10 * time.Millisecond, 95: 19 * time.Millisecond, 100: 20 * time.Millisecond} {
		if got := pct(ds, p); got != want {
			t.Errorf("p%d = %s, want %s", p, got, want)
		}
	}
	if ds[0] != 20*time.Millisecond {
		t.Error("pct sorted its argument in place")
	}
}
