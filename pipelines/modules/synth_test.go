package modules

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func synthInput() SynthesisInput {
	now := time.Date(2025, 1, 6, 14, 0, 0, 0, time.UTC)
	fetched := now.Add(-90 * time.Second)
	return SynthesisInput{Ticker: "NVDA", Now: now, Missing: []string{ModuleDarkPool},
		Modules: []ModuleView{
			{Module: ModuleOptionsFlow, Freshness: "fresh", Served: true, FetchedAt: &fetched,
				Analysis: &UnitAnalysis{Result: json.RawMessage(`{"summary":"calls dominate","score":3}`)}},
			{Module: ModuleShortInterest, Freshness: "stale", Served: true, FetchedAt: &fetched,
				Analysis: &UnitAnalysis{Result: json.RawMessage(`{"score":1}`)}},
			{Module: ModulePriceAction, Freshness: "fresh", Served: true,
				Analysis: &UnitAnalysis{Result: json.RawMessage(`{"sentiment":"bullish","score":2}`)}},
			{Module: ModuleDarkPool, Freshness: "absent"},
		}}
}

// The template is one line per served module, then the missing ones; the
// same input gives the same text.
func TestTemplate(t *testing.T) {
	t.Parallel()
	s, err := Template{}.Synthesize(context.Background(), synthInput())
	if err != nil {
		t.Fatal(err)
	}
	want := "NVDA options_flow: fresh, data 1m30s old; calls dominate.\n" +
		"NVDA short_interest: stale, data 1m30s old; {\"score\":1}.\n" +
		"NVDA price_action: fresh; bullish.\n" +
		"Missing: dark_pool."
	if s.Text != want || s.Source != "template" {
		t.Errorf("text %q source %s, want %q", s.Text, s.Source, want)
	}
	none, _ := Template{}.Synthesize(context.Background(), SynthesisInput{Ticker: "X", Missing: []string{ModuleDarkPool}})
	if !strings.HasPrefix(none.Text, "No module of X has data to serve yet.") {
		t.Errorf("nothing served: %q", none.Text)
	}
}

type synthFunc func(ctx context.Context, in SynthesisInput) (Synthesis, error)

func (f synthFunc) Synthesize(ctx context.Context, in SynthesisInput) (Synthesis, error) {
	return f(ctx, in)
}

// Fallback answers with the primary when it succeeds, else with the
// template; the primary's deadline keeps the reserve.
func TestFallback(t *testing.T) {
	t.Parallel()
	ok := synthFunc(func(context.Context, SynthesisInput) (Synthesis, error) {
		return Synthesis{Text: "llm", Source: "llm"}, nil
	})
	if s, err := (Fallback{Primary: ok}).Synthesize(context.Background(), synthInput()); err != nil || s.Source != "llm" {
		t.Errorf("primary ok: %+v %v", s, err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel()
	var primaryDeadline time.Time
	failing := synthFunc(func(ctx context.Context, _ SynthesisInput) (Synthesis, error) {
		primaryDeadline, _ = ctx.Deadline()
		return Synthesis{}, errors.New("model overloaded")
	})
	s, err := (Fallback{Primary: failing, Reserve: time.Minute}).Synthesize(ctx, synthInput())
	if err != nil || s.Source != "template" {
		t.Errorf("primary failed: %+v %v", s, err)
	}
	if want, _ := ctx.Deadline(); !primaryDeadline.Equal(want.Add(-time.Minute)) {
		t.Errorf("primary deadline %v, want %v", primaryDeadline, want.Add(-time.Minute))
	}
}
