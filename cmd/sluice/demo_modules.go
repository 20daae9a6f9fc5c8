package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/modules"
	"github.com/sluicehq/sluice/pipelines/registry"
)

// modulesDemo sends a stampede of refresh requests of one key (one
// upstream call), then assembles the ticker (modules.DemoScenario).
func modulesDemo(o *demoOptions) demoScenario {
	cfg := modules.Config{Source: modules.NewSynthetic(modules.SyntheticConfig{})}
	return demoScenario{
		about: fmt.Sprintf("%d refresh requests of one ticker × module at once → one upstream call; then an assemble of the ticker",
			o.modulesRequests),
		configure: func(s *registry.Settings) { s.Modules = cfg },
		run: func(ctx context.Context, _ pipelines.Spec, env pipelines.Env, _ *kadm.Client, _ *kgo.Client, out io.Writer) ([]demoRow, error) {
			r, err := modules.DemoScenario(ctx, env, modules.Config{}, modules.DemoOptions{Requests: o.modulesRequests})
			if err != nil {
				return nil, err
			}
			printModulesDemo(out, r)
			a := r.Assembly
			rows := []demoRow{
				{"modules", "refresh requests of " + r.Key, int64(r.Requests)},
				{"modules", "upstream calls for them", r.UpstreamCalls},
				{"modules", "assemble " + r.Ticker + ": modules served", int64(len(a.Served()))},
				{"modules", "assemble " + r.Ticker + ": modules missing", int64(len(a.Missing))},
			}
			if r.Job != nil {
				rows = append(rows, demoRow{"modules", "job " + r.Job.JobID + " modules (" + r.Job.Status + ")", int64(len(a.Job.Modules))})
			}
			return rows, nil
		},
	}
}

// printModulesDemo writes what the modules demo did.
func printModulesDemo(out io.Writer, r modules.DemoResult) {
	outcomes := make([]string, 0, len(r.Outcomes))
	for k, n := range r.Outcomes {
		outcomes = append(outcomes, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(outcomes)
	fmt.Fprintf(out, "  %d requests keyed %s produced at once in %v\n", r.Requests, r.Key, r.SendTook.Round(time.Millisecond))
	fmt.Fprintf(out, "  handled: %s → %d upstream call(s) (sluice_modules_upstream_calls_total)\n", strings.Join(outcomes, ", "), r.UpstreamCalls)
	fmt.Fprintf(out, "  ticker_data_modules %s %s: %s, %s\n", r.Ticker, r.Module, r.State.Status, r.State.Freshness)
	a := r.Assembly
	none := func(s []string) string {
		if len(s) == 0 {
			return "none"
		}
		return strings.Join(s, ", ")
	}
	fmt.Fprintf(out, "  assemble %s: served %s; missing %s; degraded %v\n", a.Ticker, none(a.Served()), none(a.Missing), a.Degraded)
	if j := a.Job; j != nil {
		fmt.Fprintf(out, "  job %s (created %v) refreshes %s", j.JobID, j.Created, none(j.Modules))
		if r.Job != nil {
			fmt.Fprintf(out, " → %s", r.Job.Status)
		}
		fmt.Fprintln(out)
	}
	if a.Synthesis != nil {
		fmt.Fprintf(out, "  synthesis (%s):\n    %s\n", a.Synthesis.Source, strings.ReplaceAll(a.Synthesis.Text, "\n", "\n    "))
	}
}

// modulesHint is the --keep hint of the modules API on the ops server at
// addr: an assemble of NVDA, with the Content-Type the ops server requires
// of writes and the bearer header when a token guards them (the token
// itself is never printed).
func modulesHint(addr string, token bool) string {
	auth := ""
	if token {
		auth = ` -H "Authorization: Bearer $SLUICE_API_TOKEN"`
	}
	return fmt.Sprintf("  curl -s -XPOST%s http://%s/api/v1/modules/analysis -H 'Content-Type: application/json' -d '{\"ticker\":\"NVDA\"}'\n", auth, addr)
}
