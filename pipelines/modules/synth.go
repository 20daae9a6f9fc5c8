package modules

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// SynthesisInput is what a synthesizer summarises: the assembled modules
// of a ticker (served or not), the modules without servable data, and the
// time of the assemble.
type SynthesisInput struct {
	Ticker  string
	Modules []ModuleView
	Missing []string
	Now     time.Time
}

// Synthesis is the short text summarising a ticker's modules, and who
// wrote it.
type Synthesis struct {
	Text   string `json:"text"`
	Source string `json:"source"`
}

// Synthesizer writes the synthesis of an assemble. Synthesize must return
// when ctx is done (its deadline is what is left of the assemble's
// budget); a late answer is dropped by the caller. Implementations are
// called concurrently.
type Synthesizer interface {
	Synthesize(ctx context.Context, in SynthesisInput) (Synthesis, error)
}

// Template is the deterministic synthesizer: one line per module with its
// freshness, the age of its data and the summary of its analysis (the
// result's "summary" string, else its "signal", else its "sentiment",
// else the result itself, shortened), then the modules missing. The same input gives the same
// text.
type Template struct{}

// Synthesize implements Synthesizer.
func (Template) Synthesize(_ context.Context, in SynthesisInput) (Synthesis, error) {
	var b strings.Builder
	served := 0
	for _, v := range in.Modules {
		if !v.Served {
			continue
		}
		served++
		fmt.Fprintf(&b, "%s %s: %s", in.Ticker, v.Module, v.Freshness)
		if v.FetchedAt != nil {
			fmt.Fprintf(&b, ", data %s old", in.Now.Sub(*v.FetchedAt).Round(time.Second))
		}
		if v.Analysis != nil {
			fmt.Fprintf(&b, "; %s", analysisSummary(v.Analysis.Result))
		} else {
			b.WriteString("; no analysis yet")
		}
		b.WriteString(".\n")
	}
	if served == 0 {
		fmt.Fprintf(&b, "No module of %s has data to serve yet.\n", in.Ticker)
	}
	if len(in.Missing) > 0 {
		fmt.Fprintf(&b, "Missing: %s.\n", strings.Join(in.Missing, ", "))
	}
	return Synthesis{Text: strings.TrimSuffix(b.String(), "\n"), Source: "template"}, nil
}

// analysisSummary returns the human part of an analysis result.
func analysisSummary(result json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(result, &m) == nil {
		for _, k := range []string{"summary", "signal", "sentiment"} {
			if s, ok := m[k].(string); ok && s != "" {
				return clipTo(s, 200)
			}
		}
	}
	return clipTo(string(result), 200)
}

// Fallback tries Primary (an LLM, say) in the time left and answers with
// Template when Primary fails or has not answered Reserve before the
// context's deadline (without a deadline, Primary has all the time it
// takes). Primary must honour its context.
type Fallback struct {
	Primary Synthesizer
	Reserve time.Duration
}

// Synthesize implements Synthesizer.
func (f Fallback) Synthesize(ctx context.Context, in SynthesisInput) (Synthesis, error) {
	pctx := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		pctx, cancel = context.WithDeadline(ctx, dl.Add(-f.Reserve))
		defer cancel()
	}
	if s, err := f.Primary.Synthesize(pctx, in); err == nil {
		return s, nil
	}
	return Template{}.Synthesize(ctx, in)
}
