package modules

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// Each module's analyzer reads the synthetic payloads into a summary,
// deterministically (same payload, same bytes).
func TestDefaultAnalyzers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2025, 1, 16, 14, 7, 0, 0, time.UTC)
	src := NewSynthetic(SyntheticConfig{Now: func() time.Time { return now }})
	want := map[string][]string{
		ModuleOptionsFlow:   {"calls", "puts", "call_share", "sentiment"},
		ModuleDarkPool:      {"prints", "total_size", "vwap"},
		ModuleShortInterest: {"short_float_pct", "days_to_cover", "squeeze_risk"},
		ModulePriceAction:   {"change_pct", "range_pct", "direction"},
	}
	for module, fields := range want {
		an := DefaultAnalyzers()[module]
		snap, err := src.Fetch(ctx, "nvda", module)
		if err != nil {
			t.Fatal(err)
		}
		a, err := an.Analyze(ctx, "nvda", snap.Payload)
		if err != nil {
			t.Fatalf("%s: %v", module, err)
		}
		b, _ := an.Analyze(ctx, "nvda", snap.Payload)
		if string(a) != string(b) {
			t.Errorf("%s: not deterministic", module)
		}
		var out map[string]any
		if err := json.Unmarshal(a, &out); err != nil {
			t.Fatal(err)
		}
		if out["ticker"] != "NVDA" || out["analyzer"] != an.Version() {
			t.Errorf("%s: %v", module, out)
		}
		for _, f := range fields {
			if _, ok := out[f]; !ok {
				t.Errorf("%s: no %s in %v", module, f, out)
			}
		}
	}
	if _, err := DefaultAnalyzers()[ModuleDarkPool].Analyze(ctx, "X", json.RawMessage(`[1]`)); err == nil {
		t.Error("a payload that is not an object analysed")
	}
}

// The rules on hand-made payloads, the "data" arrays of the Unusual Whales
// answers included.
func TestAnalyzerRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		module, payload, field string
		want                   any
	}{
		{ModuleOptionsFlow, `{"flows":[{"type":"call","premium":700},{"type":"put","premium":300}]}`, "sentiment", "bullish"},
		{ModuleOptionsFlow, `{"data":[{"option_type":"put","total_premium":"900"},{"option_type":"call","total_premium":"100"}]}`, "sentiment", "bearish"},
		{ModuleOptionsFlow, `{}`, "sentiment", "neutral"},
		{ModuleDarkPool, `{"prints":[{"price":10,"size":100},{"price":20,"size":300}]}`, "vwap", 17.5},
		{ModuleShortInterest, `{"short_float_pct":25,"days_to_cover":6}`, "squeeze_risk", "high"},
		{ModuleShortInterest, `{"data":[{"percent_returned":"12","days_to_cover_returned":"1"}]}`, "squeeze_risk", "elevated"},
		{ModulePriceAction, `{"open":100,"close":99,"high":101,"low":98}`, "direction", "down"},
	}
	for _, c := range cases {
		b, err := DefaultAnalyzers()[c.module].Analyze(ctx, "T", json.RawMessage(c.payload))
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		_ = json.Unmarshal(b, &out)
		if out[c.field] != c.want {
			t.Errorf("%s %s: %s = %v, want %v", c.module, c.payload, c.field, out[c.field], c.want)
		}
	}
}
