package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines/modules"
	"github.com/sluicehq/sluice/topics"
)

// modulesOptions are the flags shared by the modules subcommands.
type modulesOptions struct {
	refreshTopic string
}

// register adds --refresh-topic to cmd (a command that may produce refresh
// requests).
func (o *modulesOptions) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.refreshTopic, "refresh-topic", topics.ModulesRefresh, "topic of the refresh requests")
}

func newModulesCmd(g *globalConfig) *cobra.Command {
	o := &modulesOptions{}
	cmd := commandGroup("modules", "Module caches per ticker (pipeline modules): refresh, status, analysis, jobs, catalog",
		newModulesRefreshCmd(g, o), newModulesStatusCmd(g), newModulesAnalyzeCmd(g, o), newModulesJobsCmd(g),
		newModulesCatalogCmd(g))
	return cmd
}

// reasonCLI is the reason of the refresh requests the CLI produces.
const reasonCLI = "cli"

// noProducer is the producer of commands that produce nothing.
type noProducer struct{}

func (noProducer) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	out := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		out[i] = kgo.ProduceResult{Record: r, Err: errors.New("this command does not produce")}
	}
	return out
}

// modulesAssembler connects to PostgreSQL (and to Kafka when produce is
// set) and returns an assembler and a function closing the connections.
func modulesAssembler(ctx context.Context, g *globalConfig, o *modulesOptions, produce bool, budget time.Duration) (*modules.Assembler, func(), error) {
	if err := g.needDatabase(); err != nil {
		return nil, func() {}, err
	}
	var prod modules.Producer = noProducer{}
	closeAll := func() {}
	topic := topics.ModulesRefresh
	if o != nil {
		topic = o.refreshTopic
	}
	if produce {
		kopts, err := kafkaOpts(ctx, g)
		if err != nil {
			return nil, closeAll, err
		}
		cl, err := kgo.NewClient(modules.ProducerOpts(kopts)...)
		if err != nil {
			return nil, closeAll, fmt.Errorf("kafka client: %w", err)
		}
		prod, closeAll = cl, cl.Close
	}
	pool, err := connectPostgres(ctx, g.DatabaseURL)
	if err != nil {
		return nil, closeAll, err
	}
	closeKafka := closeAll
	closeAll = func() { pool.Close(); closeKafka() }
	asm, err := modules.NewAssembler(pool, prod, prometheus.NewRegistry(),
		modules.AssembleConfig{RefreshTopic: topic, Budget: budget})
	return asm, closeAll, err
}

// withReader runs fn with an assembler that only reads PostgreSQL, and
// closes its connections afterwards.
func withReader(ctx context.Context, g *globalConfig, fn func(*modules.Assembler) error) error {
	asm, closeAll, err := modulesAssembler(ctx, g, nil, false, 0)
	defer closeAll()
	if err != nil {
		return err
	}
	return fn(asm)
}

func newModulesRefreshCmd(g *globalConfig, o *modulesOptions) *cobra.Command {
	var force bool
	var wait time.Duration
	var api string
	cmd := &cobra.Command{
		Use:   "refresh TICKER MODULE",
		Short: "Ask for a refresh of TICKER × MODULE (skipped when fresh unless --force)",
		Long: `refresh produces a request to modules.refresh, keyed TICKER:MODULE, unless
the module is fresh and --force is not set (its state is then printed). The
modules-refresh group does the work; with --wait the command polls the
module's status until the refresh is written (ready or error) or the wait
runs out. With --api the request goes to a running process's
POST /api/v1/modules/refresh (Authorization: Bearer $SLUICE_API_TOKEN when
set) instead of straight to Kafka and PostgreSQL.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if wait < 0 {
				return fmt.Errorf("invalid --wait %v (want ≥ 0)", wait)
			}
			ctx := cmd.Context()
			body, _ := json.Marshal(map[string]any{"ticker": args[0], "module": args[1], "force": force})
			rec, err := modules.DecodeRefresh(nil, body)
			if err != nil {
				return err
			}
			var c modulesClient
			if api != "" {
				c = &httpModules{base: strings.TrimSuffix(api, "/")}
			} else {
				asm, closeAll, err := modulesAssembler(ctx, g, o, true, 0)
				defer closeAll()
				if err != nil {
					return err
				}
				c = asm
			}
			start := time.Now()
			ans, err := c.Refresh(ctx, rec, reasonCLI)
			if err != nil {
				return cliError(err)
			}
			w := cmd.OutOrStdout()
			if !ans.Accepted {
				fmt.Fprintf(w, "%s is fresh (fetched %s ago): not refreshed (use --force)\n", ans.Key, age(ans.State.FetchedAt, start))
				return nil
			}
			fmt.Fprintf(w, "%s refresh requested: request %s, partition %d offset %d\n", ans.Key, ans.RequestID, ans.Partition, ans.Offset)
			if wait == 0 {
				return nil
			}
			v, err := waitRefreshed(ctx, c, ans.State.Module, ans.Key, start, wait)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%s %s (%s) after %s\n", ans.Key, v.Status, v.Freshness, time.Since(start).Round(time.Millisecond))
			if v.Status == string(modules.StatusError) {
				return fmt.Errorf("%s refresh failed: %s", ans.Key, v.LastError)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "refresh even when fresh")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the refresh to be written, e.g. 30s (0: do not wait)")
	cmd.Flags().StringVar(&api, "api", "", "base URL of a running sluice ops server, e.g. http://127.0.0.1:9464")
	o.register(cmd)
	return g.withServiceFlags(cmd, kafkaFlags|postgresFlags)
}

// modulesClient is what refresh --wait needs, in process or over HTTP.
type modulesClient interface {
	Refresh(ctx context.Context, rec modules.RefreshRecord, reason string) (modules.RefreshAnswer, error)
	Status(ctx context.Context, ticker, module string) (modules.TickerStatus, error)
}

// waitRefreshed polls the status of key's module until it was written
// (ready or error) at or after since, for at most wait.
func waitRefreshed(ctx context.Context, c modulesClient, module, key string, since time.Time, wait time.Duration) (modules.ModuleView, error) {
	ticker, _, _ := strings.Cut(key, ":")
	deadline := time.Now().Add(wait)
	var last modules.ModuleView
	for {
		st, err := c.Status(ctx, ticker, module)
		if err != nil {
			return last, cliError(err)
		}
		if len(st.Modules) == 1 {
			last = st.Modules[0]
			done := last.Status == string(modules.StatusReady) || last.Status == string(modules.StatusError)
			if done && last.UpdatedAt != nil && !last.UpdatedAt.Before(since.Add(-time.Second)) {
				return last, nil
			}
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("%s not refreshed after %s (status %s, freshness %s): is `sluice run modules` running?",
				key, wait, orDash(last.Status), orDash(last.Freshness))
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// httpModules is the modules API of a running process.
type httpModules struct{ base string }

func (h *httpModules) Refresh(ctx context.Context, rec modules.RefreshRecord, _ string) (modules.RefreshAnswer, error) {
	body, _ := json.Marshal(map[string]json.RawMessage{"ticker": rec.Ticker, "module": rec.Module, "force": rec.Force})
	var ans modules.RefreshAnswer
	err := h.do(ctx, http.MethodPost, "/api/v1/modules/refresh", body, &ans)
	return ans, err
}

func (h *httpModules) Status(ctx context.Context, ticker, module string) (modules.TickerStatus, error) {
	q := url.Values{"ticker": {ticker}, "module": {module}}
	var st modules.TickerStatus
	err := h.do(ctx, http.MethodGet, "/api/v1/modules/status?"+q.Encode(), nil, &st)
	return st, err
}

// do sends a request and decodes a 2xx answer into out; any other answer
// is an error carrying the API's error text and rule.
func (h *httpModules) do(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if tok := apiToken(); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("modules API: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode/100 != 2 {
		var e struct{ Error, Rule string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			if e.Rule != "" {
				return fmt.Errorf("%s: %s (HTTP %d)", e.Rule, e.Error, resp.StatusCode)
			}
			return fmt.Errorf("%s (HTTP %d)", e.Error, resp.StatusCode)
		}
		return fmt.Errorf("modules API %s %s: HTTP %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("modules API %s %s: response: %w", method, path, err)
	}
	return nil
}

// cliError turns an input error into one line "rule: reason".
func cliError(err error) error {
	var ie *modules.InputError
	if errors.As(err, &ie) && ie.Rule == "" {
		return ie.Err
	}
	return err
}

// age is how long before now t was, or "-".
func age(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return now.Sub(*t).Round(time.Second).String()
}

func newModulesStatusCmd(g *globalConfig) *cobra.Command {
	var module string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status TICKER",
		Short: "Show the status and derived freshness of a ticker's modules",
		Long: `status reads the view ticker_modules_status: per module the stored status,
the freshness (fresh, stale, expired, missing, unknown; absent when the module
has no row), whether old data may be served, the age of the data and the last
error. --json prints the status as one JSON object.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withReader(cmd.Context(), g, func(asm *modules.Assembler) error {
				st, err := asm.Status(cmd.Context(), args[0], module)
				if err != nil {
					return cliError(err)
				}
				if asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(st)
				}
				return printModuleViews(cmd.OutOrStdout(), st.Ticker, st.Modules, time.Now())
			})
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "only this module")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return g.withServiceFlags(cmd, postgresFlags)
}

// printModuleViews prints one line per module.
func printModuleViews(w io.Writer, ticker string, views []modules.ModuleView, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TICKER\tMODULE\tSTATUS\tFRESHNESS\tSERVE STALE\tREFRESHING\tDATA AGE\tDATA DATE\tLAST ERROR")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%v\t%s\t%s\t%s\n", ticker, v.Module, v.Status, v.Freshness, v.CanServeStale,
			v.RefreshInProgress, age(v.FetchedAt, now), orDash(v.DataDate), orDash(v.LastError))
	}
	return tw.Flush()
}

func newModulesAnalyzeCmd(g *globalConfig, o *modulesOptions) *cobra.Command {
	var mods string
	var asJSON bool
	var budget time.Duration
	cmd := &cobra.Command{
		Use:   "analyze TICKER",
		Short: "Assemble a ticker's modules and their synthesis (never waits for a refresh)",
		Long: `analyze answers as POST /api/v1/modules/analysis does: it reads the modules
(default: every enabled one), creates the analysis job of those missing, stale,
expired or absent and, when it is new, requests their refreshes; it prints the
synthesis, the modules and what is missing. A synthesis not finished within
--budget is dropped (degraded). --json prints the whole answer.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("budget") {
				var err error
				if budget, err = modules.ParseAssembleBudget(os.Getenv); err != nil {
					return err
				}
			}
			if budget <= 0 {
				return fmt.Errorf("invalid --budget %v (want > 0)", budget)
			}
			var list []string
			if mods != "" {
				list = strings.Split(mods, ",")
			}
			asm, closeAll, err := modulesAssembler(cmd.Context(), g, o, true, budget)
			defer closeAll()
			if err != nil {
				return err
			}
			out, err := asm.Assemble(cmd.Context(), modules.AssembleRequest{Ticker: args[0], Modules: list})
			if err != nil {
				return cliError(err)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(w).Encode(out)
			}
			if out.Synthesis != nil {
				fmt.Fprintf(w, "%s\n\n", out.Synthesis.Text)
			} else {
				fmt.Fprintln(w, "(no synthesis: degraded)")
			}
			if err := printModuleViews(w, out.Ticker, out.Modules, out.GeneratedAt); err != nil {
				return err
			}
			if len(out.Missing) > 0 {
				fmt.Fprintf(w, "missing: %s\n", strings.Join(out.Missing, ", "))
			}
			if j := out.Job; j != nil {
				fmt.Fprintf(w, "job %s %s (created %v) for %s\n", j.JobID, j.Status, j.Created, strings.Join(j.Modules, ","))
				if j.RefreshError != "" {
					return fmt.Errorf("refresh requests not produced: %s", j.RefreshError)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&mods, "modules", "", "comma-separated modules (default: every enabled one)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&budget, "budget", modules.DefaultAssembleBudget,
		"time budget of the answer (default: env MODULES_ASSEMBLE_BUDGET, else 5s)")
	o.register(cmd)
	return g.withServiceFlags(cmd, kafkaFlags|postgresFlags)
}

func newModulesJobsCmd(g *globalConfig) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "jobs JOB_ID",
		Short: "Show an analysis job: its derived status (pending, done, failed) and its modules",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withReader(cmd.Context(), g, func(asm *modules.Assembler) error {
				j, err := asm.Job(cmd.Context(), args[0])
				if err != nil {
					return cliError(err)
				}
				w := cmd.OutOrStdout()
				if asJSON {
					return json.NewEncoder(w).Encode(j)
				}
				fmt.Fprintf(w, "job %s %s: %s %s, created %s (key %s)\n", j.JobID, j.Status, j.Ticker, j.JobType,
					j.CreatedAt.Format(time.RFC3339), j.IdempotencyKey)
				return printModuleViews(w, j.Ticker, j.Modules, time.Now())
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return g.withServiceFlags(cmd, postgresFlags)
}

func newModulesCatalogCmd(g *globalConfig) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "List the analysis catalog: thresholds and TTLs per module",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cat modules.Catalog
			if err := withReader(cmd.Context(), g, func(asm *modules.Assembler) (err error) {
				cat, err = asm.Catalog(cmd.Context())
				return err
			}); err != nil {
				return err
			}
			ids := make([]string, 0, len(cat))
			for id := range cat {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				for _, id := range ids {
					if err := enc.Encode(catalogJSON(cat[id])); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MODULE\tENABLED\tFRESHNESS\tDATA TTL\tANALYSIS TTL\tMAX STALE")
			for _, id := range ids {
				m := cat[id]
				fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\n", id, m.Enabled, optDur(m.FreshnessThreshold), m.DataTTL, m.AnalysisTTL, optDur(m.MaxStale))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, one module per line")
	return g.withServiceFlags(cmd, postgresFlags)
}

// catalogJSON is a catalog entry as printed by catalog --json, in hours as
// the table stores them (null: none).
func catalogJSON(m modules.Module) map[string]any {
	hours := func(d *time.Duration) any {
		if d == nil {
			return nil
		}
		return d.Hours()
	}
	return map[string]any{"module_id": m.ID, "enabled": m.Enabled, "freshness_threshold_hours": hours(m.FreshnessThreshold),
		"data_ttl_hours": m.DataTTL.Hours(), "analysis_ttl_hours": m.AnalysisTTL.Hours(), "max_stale_hours": hours(m.MaxStale)}
}

func optDur(d *time.Duration) string {
	if d == nil {
		return "-"
	}
	return d.String()
}
