package modules

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
)

// Analyzer turns one module's upstream payload into its unit analysis (a
// JSON object stored in unit_analyses.result). Version names the rules: it
// is part of the input hash, so a new version analyses again what an older
// one already did. Analyze must be deterministic for a given payload (the
// stored analysis of an input hash is reused while it is current) and safe
// for concurrent use; an error fails the analysis only, the data stays
// ready (modules.analyzer.<module>).
type Analyzer interface {
	Version() string
	Analyze(ctx context.Context, ticker string, payload json.RawMessage) (json.RawMessage, error)
}

// DefaultAnalyzers returns the deterministic rule-based analyzers of the
// four modules. They read the synthetic source's payloads and the same
// fields under a top-level "data" array (the Unusual Whales answers); a
// payload without them is analysed as empty, not refused.
func DefaultAnalyzers() map[string]Analyzer {
	return map[string]Analyzer{
		ModuleOptionsFlow:   ruleAnalyzer{version: "options_flow-rules-1", fn: analyzeOptionsFlow},
		ModuleDarkPool:      ruleAnalyzer{version: "dark_pool-rules-1", fn: analyzeDarkPool},
		ModuleShortInterest: ruleAnalyzer{version: "short_interest-rules-1", fn: analyzeShortInterest},
		ModulePriceAction:   ruleAnalyzer{version: "price_action-rules-1", fn: analyzePriceAction},
	}
}

// ruleAnalyzer is an Analyzer made of a pure function of the payload.
type ruleAnalyzer struct {
	version string
	fn      func(p map[string]any) map[string]any
}

func (a ruleAnalyzer) Version() string { return a.version }

func (a ruleAnalyzer) Analyze(_ context.Context, ticker string, payload json.RawMessage) (json.RawMessage, error) {
	var p map[string]any
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("%s: payload is not a JSON object: %w", a.version, err)
	}
	out := a.fn(p)
	out["ticker"], out["analyzer"] = NormalizeTicker(ticker), a.version
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("%s: encode: %w", a.version, err)
	}
	return b, nil
}

// items returns the objects of the array p[name], or of p["data"].
func items(p map[string]any, name string) []map[string]any {
	arr, ok := p[name].([]any)
	if !ok {
		arr, _ = p["data"].([]any)
	}
	var out []map[string]any
	for _, e := range arr {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// num returns the number under one of names (JSON numbers or numeric
// strings), or 0.
func num(m map[string]any, names ...string) float64 {
	for _, n := range names {
		switch v := m[n].(type) {
		case float64:
			return v
		case string:
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return 0
}

func str(m map[string]any, names ...string) string {
	for _, n := range names {
		if s, ok := m[n].(string); ok {
			return s
		}
	}
	return ""
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// analyzeOptionsFlow: call and put premium, the call share of the premium,
// and a sentiment (bullish above 60 %, bearish below 40 %).
func analyzeOptionsFlow(p map[string]any) map[string]any {
	var calls, puts, callPrem, putPrem float64
	for _, f := range items(p, "flows") {
		prem := num(f, "premium", "total_premium")
		switch str(f, "type", "option_type") {
		case "call":
			calls++
			callPrem += prem
		case "put":
			puts++
			putPrem += prem
		}
	}
	share, sentiment := 0.0, "neutral"
	if total := callPrem + putPrem; total > 0 {
		share = callPrem / total
		switch {
		case share > 0.6:
			sentiment = "bullish"
		case share < 0.4:
			sentiment = "bearish"
		}
	}
	return map[string]any{"calls": calls, "puts": puts, "call_premium": round2(callPrem), "put_premium": round2(putPrem),
		"call_share": round2(share), "sentiment": sentiment}
}

// analyzeDarkPool: print count, total size and volume-weighted price.
func analyzeDarkPool(p map[string]any) map[string]any {
	var n, size, notional float64
	for _, pr := range items(p, "prints") {
		s := num(pr, "size")
		n++
		size += s
		notional += s * num(pr, "price")
	}
	vwap := 0.0
	if size > 0 {
		vwap = round2(notional / size)
	}
	return map[string]any{"prints": n, "total_size": size, "vwap": vwap}
}

// analyzeShortInterest: squeeze risk from the short float and the days to
// cover.
func analyzeShortInterest(p map[string]any) map[string]any {
	src := p
	if rows := items(p, "data"); len(rows) > 0 {
		src = rows[len(rows)-1]
	}
	float := num(src, "short_float_pct", "percent_returned")
	dtc := num(src, "days_to_cover", "days_to_cover_returned")
	risk := "low"
	switch {
	case float >= 20 && dtc >= 5:
		risk = "high"
	case float >= 10 || dtc >= 5:
		risk = "elevated"
	}
	return map[string]any{"short_float_pct": round2(float), "days_to_cover": round2(dtc), "squeeze_risk": risk}
}

// analyzePriceAction: change and range of the bar, and its direction
// (flat within ±0.2 %).
func analyzePriceAction(p map[string]any) map[string]any {
	src := p
	if rows := items(p, "data"); len(rows) > 0 {
		src = rows[len(rows)-1]
	}
	open, closeP := num(src, "open"), num(src, "close")
	high, low := num(src, "high"), num(src, "low")
	change, rng := 0.0, 0.0
	if open > 0 {
		change = (closeP - open) / open * 100
		rng = (high - low) / open * 100
	}
	dir := "flat"
	switch {
	case change > 0.2:
		dir = "up"
	case change < -0.2:
		dir = "down"
	}
	return map[string]any{"change_pct": round2(change), "range_pct": round2(rng), "direction": dir}
}
