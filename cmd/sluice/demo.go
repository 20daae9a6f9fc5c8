package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/groupctl"
	"github.com/sluicehq/sluice/internal/localsvc"
	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/modules"
	"github.com/sluicehq/sluice/pipelines/registry"
	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/pipelines/smap"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/stages/dlq"
	"github.com/sluicehq/sluice/topics"
)

type demoOptions struct {
	keep      bool
	records   int
	smapItems int
	kafkaAddr string
	opsAddr   string
	// consoleAddr is where --keep serves the console ("" disables it).
	consoleAddr string
	timeout     time.Duration

	// modulesRequests is the size of the modules demo's stampede.
	modulesRequests int
}

func newDemoCmd(g *globalConfig) *cobra.Command {
	o := &demoOptions{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run every pipeline end to end on embedded defaults (kfake on :9092, miniredis, local object store, local PostgreSQL)",
		Long: `Starts embedded services for every service URL that is not set — a kfake Kafka
cluster on 127.0.0.1:9092 (so kcat -b localhost:9092 works), miniredis, a local
object-store directory and a local PostgreSQL from the installed binaries —
ensures the topics, migrates the database, runs each pipeline's demo scenario
with a progress bar and prints a summary. --keep leaves everything running
until Ctrl-C for exploring with kcat and the web console (sluice console, on
--console-addr), and prints the exports that point sluice commands in
another shell at the demo's services.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("log-level") && os.Getenv("LOG_LEVEL") == "" {
				g.LogLevel = "warn" // the demo shows progress on stdout; keep stderr for problems
			}
			defer ownTerminal()() // under make, Ctrl-C reaches only the demo: make demo exits with its status
			return runDemo(cmd.Context(), g, o, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&o.keep, "keep", false, "keep the services and pipelines running after the scenarios (Ctrl-C to stop)")
	cmd.Flags().IntVar(&o.records, "records", 20000, "silver: bronze records to produce (10% invalid)")
	cmd.Flags().IntVar(&o.smapItems, "smap-items", 300, "smap: synthetic items in the demo project")
	cmd.Flags().IntVar(&o.modulesRequests, "modules-requests", 50, "modules: refresh requests of one key sent at once")
	cmd.Flags().StringVar(&o.kafkaAddr, "kafka-addr", "127.0.0.1:9092", "listen address of the embedded Kafka (when KAFKA_BROKERS is unset)")
	cmd.Flags().StringVar(&o.opsAddr, "ops-addr", "127.0.0.1:9464", "ops HTTP address (/metrics, /readyz, pipeline APIs); empty disables it")
	cmd.Flags().StringVar(&o.consoleAddr, "console-addr", console.DefaultAddr, "with --keep: the web console's address (sluice console); empty disables it")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up on a scenario after this long")
	return g.withServiceFlags(cmd, allServiceFlags)
}

// demoRuntime is what the demo started and must stop.
type demoRuntime struct {
	stops []func()
	used  [][2]string // service, what
	// exports are the variables of the services the demo started (name,
	// value); fromEnv names the variables the caller's environment set.
	exports [][2]string
	fromEnv []string
}

func (d *demoRuntime) close() {
	for i := len(d.stops) - 1; i >= 0; i-- {
		d.stops[i]()
	}
}

// startEmbedded fills every unset service URL of g with an embedded default.
func startEmbedded(ctx context.Context, g *globalConfig, o *demoOptions, out io.Writer) (*demoRuntime, error) {
	d := &demoRuntime{}
	if len(g.Kafka.Brokers) == 0 {
		var port int
		if _, err := fmt.Sscanf(o.kafkaAddr[strings.LastIndex(o.kafkaAddr, ":")+1:], "%d", &port); err != nil {
			return d, fmt.Errorf("invalid --kafka-addr %q", o.kafkaAddr)
		}
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DefaultNumPartitions(3),
			kfake.BrokerConfigs(map[string]string{"log.cleaner.backoff.ms": "5000"}))
		if err != nil {
			return d, fmt.Errorf("embedded Kafka on %s: %w (is another broker or demo running? set KAFKA_BROKERS to use it)", o.kafkaAddr, err)
		}
		d.stops = append(d.stops, c.Close)
		g.Kafka.Brokers = c.ListenAddrs()
		d.used = append(d.used, [2]string{"Kafka", "embedded kfake on " + strings.Join(g.Kafka.Brokers, ",")})
		d.exports = append(d.exports, [2]string{"KAFKA_BROKERS", strings.Join(g.Kafka.Brokers, ",")})
	} else {
		d.used = append(d.used, [2]string{"Kafka", strings.Join(g.Kafka.Brokers, ",") + " (KAFKA_BROKERS)"})
		d.fromEnv = append(d.fromEnv, "KAFKA_BROKERS")
	}
	if g.DatabaseURL == "" {
		fmt.Fprintln(out, "starting a local PostgreSQL …")
		pg, err := localsvc.StartPostgres(ctx, localsvc.PostgresOptions{})
		if err != nil {
			if errors.Is(err, localsvc.ErrNotFound) {
				return d, fmt.Errorf("no PostgreSQL binaries found: install them (apt-get install -y postgresql) or set DATABASE_URL")
			}
			return d, fmt.Errorf("local PostgreSQL: %w", err)
		}
		d.stops = append(d.stops, func() { _ = pg.Stop() })
		url, err := pg.CreateDatabase(ctx, "sluice")
		if err != nil {
			return d, fmt.Errorf("local PostgreSQL: %w", err)
		}
		g.DatabaseURL = url
		d.used = append(d.used, [2]string{"PostgreSQL", fmt.Sprintf("local server on 127.0.0.1:%d (throwaway)", pg.Port)})
		// Trust authentication: the URL holds no password.
		d.exports = append(d.exports, [2]string{"DATABASE_URL", url})
	} else {
		d.used = append(d.used, [2]string{"PostgreSQL", "DATABASE_URL"})
		d.fromEnv = append(d.fromEnv, "DATABASE_URL")
	}
	if g.RedisURL == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return d, fmt.Errorf("embedded Redis: %w", err)
		}
		d.stops = append(d.stops, mr.Close)
		g.RedisURL = "redis://" + mr.Addr() + "/0"
		d.used = append(d.used, [2]string{"Redis", "embedded miniredis on " + mr.Addr()})
		d.exports = append(d.exports, [2]string{"REDIS_URL", g.RedisURL})
	} else {
		d.used = append(d.used, [2]string{"Redis", "REDIS_URL"})
		d.fromEnv = append(d.fromEnv, "REDIS_URL")
	}
	if g.S3Endpoint == "" {
		d.used = append(d.used, [2]string{"Object store", "directory " + g.ObjectStoreDir})
		dir := g.ObjectStoreDir
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		d.exports = append(d.exports, [2]string{"OBJECT_STORE_DIR", dir})
	} else {
		d.used = append(d.used, [2]string{"Object store", "S3 " + g.S3Endpoint + " bucket " + g.S3Bucket})
		d.fromEnv = append(d.fromEnv, "S3_ENDPOINT", "S3_BUCKET", "S3_ACCESS_KEY", "S3_SECRET_KEY")
	}
	return d, nil
}

// runDemo runs the demo until its scenarios are done (with --keep, until
// ctx ends). ctx ending at any point — Ctrl-C while the services start,
// during a scenario or after them — is a clean stop, not a failure: what
// was started is stopped (clients closed, pipelines stopped, embedded
// services shut down), one line says what was interrupted, and runDemo
// returns nil, so that sluice demo (and make demo) exit 0.
func runDemo(ctx context.Context, g *globalConfig, o *demoOptions, out io.Writer) error {
	step := "startup"
	err := runDemoSteps(ctx, g, o, out, &step)
	if err != nil && ctx.Err() != nil {
		// Printed once runDemoSteps' deferred stops have run.
		fmt.Fprintf(out, "\ndemo interrupted during %s: everything it started is stopped\n", step)
		return nil
	}
	return err
}

// runDemoSteps is runDemo without the interrupt handling; it records the
// step it is at in *step ("startup", "the NAME scenario").
func runDemoSteps(ctx context.Context, g *globalConfig, o *demoOptions, out io.Writer, step *string) error {
	// The scenarios wait for their records to be processed: with none they
	// would wait for --timeout and fail (and smap would silently use 300).
	switch {
	case o.records < 1:
		return fmt.Errorf("invalid --records %d (want ≥ 1)", o.records)
	case o.smapItems < 1:
		return fmt.Errorf("invalid --smap-items %d (want ≥ 1)", o.smapItems)
	case o.modulesRequests < 1:
		return fmt.Errorf("invalid --modules-requests %d (want ≥ 1)", o.modulesRequests)
	case o.timeout <= 0:
		return fmt.Errorf("invalid --timeout %v (want > 0)", o.timeout)
	}
	d, err := startEmbedded(ctx, g, o, out)
	defer d.close()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, u := range d.used {
		fmt.Fprintf(tw, "  %s\t%s\n", u[0], u[1])
	}
	tw.Flush()

	scenarios := demoScenarios(o)
	var settings registry.Settings
	for _, s := range scenarios {
		s.configure(&settings)
	}
	specs := registry.All(settings)
	env, cl, closeEnv, err := g.buildEnvClient(ctx, needsOf(specs))
	defer closeEnv()
	if err != nil {
		return err
	}
	adm := kadm.NewClient(cl)
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	changes, err := topics.Ensure(ectx, adm, topics.Catalog())
	cancel()
	if err != nil {
		return fmt.Errorf("ensure topics: %w", err)
	}
	created := 0
	for _, c := range changes {
		if c.Action != "ok" {
			created++
		}
	}
	fmt.Fprintf(out, "topics: %d in the catalog, %d created or aligned\n", len(changes), created)
	applied, err := schemas.Migrate(ctx, g.DatabaseURL)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintf(out, "migrations: %d applied\n", len(applied))

	set, err := pipelines.Build(env, pipelines.Naming{}, specs)
	if err != nil {
		return err
	}
	defer set.Close()
	// The scenarios run under pipeCtx, which ends when the pipelines stop on
	// their own (a service failed, the ops address is taken): the scenarios
	// would otherwise wait for records nobody processes until --timeout.
	runCtx, stopRun := context.WithCancel(ctx)
	pipeCtx, pipesDown := context.WithCancelCause(ctx)
	defer pipesDown(nil)
	served := make(chan error, 1)
	opsBound := make(chan net.Addr, 1)
	go func() {
		// The demo is a local, throwaway stack: its API needs no token,
		// but takes one when SLUICE_API_TOKEN is set.
		ops := opshttp.Listen{Addr: o.opsAddr, Token: apiToken(), Open: true}
		err := serve(runCtx, env, ops, set.Services, func(a net.Addr) { opsBound <- a })
		if err != nil {
			pipesDown(err)
		} else {
			pipesDown(errPipelinesStopped)
		}
		served <- err
	}()
	stopAll := func() error {
		stopRun()
		return <-served
	}
	// pipelinesFailed is the reason the pipelines stopped before the demo
	// stopped them, or nil.
	pipelinesFailed := func() error {
		if ctx.Err() != nil || pipeCtx.Err() == nil {
			return nil
		}
		return context.Cause(pipeCtx)
	}

	var summary []demoRow
	for _, spec := range specs {
		s, ok := scenarios[spec.Name]
		if !ok {
			continue // the pipeline runs, without a scenario
		}
		fmt.Fprintf(out, "\n▶ %s: %s\n", spec.Name, s.about)
		*step = "the " + spec.Name + " scenario"
		sctx, cancel := context.WithTimeout(pipeCtx, o.timeout)
		rows, err := s.run(sctx, spec, env, adm, cl, out)
		cancel()
		if err != nil {
			perr := pipelinesFailed()
			_ = stopAll()
			if perr != nil {
				return fmt.Errorf("pipelines: %w", perr)
			}
			return fmt.Errorf("%s scenario: %w", spec.Name, err)
		}
		summary = append(summary, rows...)
	}
	*step = "the shutdown"

	fmt.Fprintln(out, "\nSummary")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pipeline\twhat\tcount\t")
	for _, r := range summary {
		fmt.Fprintf(tw, "%s\t%s\t%d\t\n", r.pipeline, r.what, r.count)
	}
	tw.Flush()

	if o.keep {
		// The address the ops server bound (the chosen port for
		// --ops-addr :0); serve reports it before it starts the pipelines.
		var ops net.Addr
		if o.opsAddr != "" && env.Ops != nil {
			select {
			case ops = <-opsBound:
			case <-pipeCtx.Done():
			}
		}
		// One write, so that a reader seeing the first line sees them all.
		hints := fmt.Sprintf("\nEverything keeps running; Ctrl-C to stop. Try:\n"+
			"  kcat -b %[1]s -L\n"+
			"  kcat -b %[1]s -C -t %[2]s -X isolation.level=read_committed -f '%%k %%h\\n%%s\\n\\n' -e\n"+
			"  echo 'VNM:{\"task_type\":\"ta.bar\",\"payload\":{\"symbol\":\"VNM\",\"trade_date\":\"2024-05-02\",\"open\":1,\"high\":2,\"low\":1,\"close\":2,\"volume\":10}}' | kcat -b %[1]s -P -t %[3]s -K: -X topic.partitioner=murmur2_random\n",
			strings.Join(g.Kafka.Brokers, ","), topics.BronzeDLQ, topics.BronzeRecords)
		if ops != nil {
			hints += fmt.Sprintf("  curl -s http://%s/metrics | grep sluice_\n", dialAddr(ops))
			hints += modulesHint(dialAddr(ops), apiToken() != "")
		}
		hints += d.envBlock()
		consoleDone := make(chan struct{})
		consoleCtx, stopConsole := context.WithCancel(ctx)
		if o.consoleAddr == "" {
			close(consoleDone)
		} else if c, ln, err := listenConsole(consoleConfig(env, specs), o.consoleAddr); err != nil {
			// The demo is useful without it (another console may hold the port).
			hints += fmt.Sprintf("\nconsole not started: %v\n", err)
			close(consoleDone)
		} else {
			hints += "\n" + consoleLine(ln.Addr(), consoleToken() != "") + "\n"
			go func() {
				defer close(consoleDone)
				defer c.Close()
				if err := c.Serve(consoleCtx, ln); err != nil {
					fmt.Fprintf(out, "console stopped: %v\n", err)
				}
			}()
		}
		fmt.Fprint(out, hints)
		select {
		case <-ctx.Done():
		case <-pipeCtx.Done():
		}
		stopConsole()
		<-consoleDone
	}
	perr := pipelinesFailed()
	if err := stopAll(); err != nil {
		return fmt.Errorf("pipelines: %w", err)
	}
	if perr != nil {
		return fmt.Errorf("pipelines: %w", perr)
	}
	fmt.Fprintln(out, "demo finished")
	return nil
}

// envBlock is the shell text that points sluice commands in another
// terminal at the services the demo started: one export line of their
// variables (none holds a password: the local PostgreSQL trusts loopback
// connections, miniredis has none), and a comment naming the variables
// that came from the caller's environment, which are not printed because
// they may hold secrets.
func (d *demoRuntime) envBlock() string {
	var b strings.Builder
	b.WriteString("\nTo run sluice commands against this demo from another shell:\n")
	if len(d.exports) > 0 {
		b.WriteString("  export")
		for _, e := range d.exports {
			fmt.Fprintf(&b, " %s=%s", e[0], shellQuote(e[1]))
		}
		b.WriteString("\n")
	}
	if len(d.fromEnv) > 0 {
		fmt.Fprintf(&b, "  # and the %s of this shell (not printed: they may hold secrets)\n", strings.Join(d.fromEnv, ", "))
	}
	b.WriteString("  then: sluice lag; sluice dlq inspect --limit 5; sluice migrate --status; sluice ingest status; sluice smap progress PROJECT_ID\n")
	return b.String()
}

// shellQuote is s as one POSIX shell word: as is when it holds only
// characters no shell treats specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// dialAddr is how a client on this machine reaches a listener bound to a:
// a's own address, with localhost for an unspecified IP (":0" binds [::]).
func dialAddr(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok && (t.IP == nil || t.IP.IsUnspecified()) {
		return net.JoinHostPort("localhost", strconv.Itoa(t.Port))
	}
	return a.String()
}

// errPipelinesStopped is the cause of the demo's pipeline context when the
// pipelines returned without an error before the demo stopped them.
var errPipelinesStopped = errors.New("the pipelines stopped unexpectedly")

type demoRow struct {
	pipeline, what string
	count          int64
}

// demoScenario is one pipeline's part of the demo: configure sets the
// pipeline's settings, run drives the running pipeline (spec is its
// declaration) and reports what it did.
type demoScenario struct {
	about     string
	configure func(*registry.Settings)
	run       func(ctx context.Context, spec pipelines.Spec, env pipelines.Env, adm *kadm.Client, cl *kgo.Client, out io.Writer) ([]demoRow, error)
}

// demoScenarios returns the scenarios by pipeline name; they run in the
// registry's order. A pipeline without one runs without a scenario.
func demoScenarios(o *demoOptions) map[string]demoScenario {
	return map[string]demoScenario{silver.Name: silverDemo(o), ticks.Name: ticksDemo(o), smap.Name: smapDemo(o),
		modules.Name: modulesDemo(o), trades.Name: tradesDemo(o)}
}

// ticksDemo fetches a short synthetic session for a few symbols, segment by
// segment, through the Redis rate limiter into Parquet files.
func ticksDemo(o *demoOptions) demoScenario {
	cfg := ticks.Config{Source: ticks.NewSynthetic(ticks.SyntheticConfig{Length: 2 * time.Minute, MeanGap: 50 * time.Millisecond})}
	symbols := []string{"AAPL", "MSFT", "NVDA"}
	const date = "2024-05-02"
	return demoScenario{
		about:     fmt.Sprintf("one synthetic 2-minute session of %s on %s, fetched in ≤1000-tick segments into Parquet", strings.Join(symbols, ", "), date),
		configure: func(s *registry.Settings) { s.Ticks = cfg },
		run: func(ctx context.Context, _ pipelines.Spec, env pipelines.Env, _ *kadm.Client, _ *kgo.Client, out io.Writer) ([]demoRow, error) {
			sum, err := ticks.DemoScenario(ctx, env, cfg, "demo", date, symbols...)
			if err != nil {
				return nil, err
			}
			rows := []demoRow{{"ticks", "ticks written", sum.Ticks}, {"ticks", "Parquet segments", int64(sum.Segments)}}
			for _, j := range sum.Jobs {
				fmt.Fprintf(out, "  %-22s %-9s cursor %d  segments %d  ticks %d\n", j.JobKey, j.Status, j.Cursor, j.Segments, j.Ticks)
				if j.Status != ticks.StatusCompleted {
					return rows, fmt.Errorf("job %s ended %s (%s)", j.JobKey, j.Status, j.LastErrorType)
				}
			}
			return rows, nil
		},
	}
}

// smapDemo creates a project of synthetic items and follows it to DONE.
func smapDemo(o *demoOptions) demoScenario {
	return demoScenario{
		about:     fmt.Sprintf("a project of %d synthetic social posts: collector → object store → analytics → progress → %s", o.smapItems, topics.SmapJobCompleted),
		configure: func(s *registry.Settings) { s.Smap = smap.Config{} },
		run: func(ctx context.Context, _ pipelines.Spec, env pipelines.Env, _ *kadm.Client, _ *kgo.Client, out io.Writer) ([]demoRow, error) {
			bar := newProgressBar(out, "smap")
			p, err := smap.DemoScenario(ctx, env, smap.Config{}, smap.DemoOptions{Items: o.smapItems, Report: func(p smap.Progress) {
				bar.update(p.Processed, p.Total, p.Status)
			}})
			bar.finish()
			if err != nil {
				return nil, err
			}
			var analysed int64
			if err := env.DB.QueryRow(ctx, "SELECT count(*) FROM post_analytics WHERE project_id = $1", p.ProjectID).Scan(&analysed); err != nil {
				return nil, fmt.Errorf("count post_analytics: %w", err)
			}
			return []demoRow{
				{"smap", "project " + p.ProjectID + " items (status " + p.Status + ")", p.Total},
				{"smap", "rows in post_analytics", analysed},
				{"smap", "failed items (" + topics.SmapAnalyticsErrors + ")", p.Errors},
			}, nil
		},
	}
}

// silverDemo produces a mixed bronze corpus and waits until the silver group
// consumed all of it.
func silverDemo(o *demoOptions) demoScenario {
	return demoScenario{
		about:     fmt.Sprintf("%d bronze records (half TA bars, half SA articles, 10%% invalid) → ta_silver / sa_silver / %s", o.records, topics.BronzeDLQ),
		configure: func(s *registry.Settings) { s.Silver = silver.Config{BacklogInterval: time.Second} },
		run: func(ctx context.Context, spec pipelines.Spec, env pipelines.Env, adm *kadm.Client, cl *kgo.Client, out io.Writer) ([]demoRow, error) {
			in := spec.Consumers[0]
			corpus := silver.NewCorpus(time.Now().UnixNano(), 0.1, silver.CorpusKeys(max(1, o.records/3)))
			bar := newProgressBar(out, "produce")
			var perr error
			for i := 0; i < o.records; i++ {
				r := corpus.Next()
				cl.Produce(ctx, &kgo.Record{Topic: in.Input, Key: []byte(r.Key), Value: r.Value}, func(_ *kgo.Record, err error) {
					if err != nil && perr == nil {
						perr = err
					}
				})
				if i%2000 == 0 {
					bar.update(int64(i), int64(o.records), "")
				}
			}
			if err := cl.Flush(ctx); err != nil {
				return nil, err
			}
			if perr != nil {
				return nil, fmt.Errorf("produce: %w", perr)
			}
			bar.update(int64(o.records), int64(o.records), "")
			bar.finish()
			bar = newProgressBar(out, "silver")
			for {
				rep, err := groupctl.Lag(ctx, adm, in.Group)
				if err == nil {
					if gl, ok := rep.Group(in.Group); ok && gl.Err == nil && len(gl.Partitions) > 0 {
						var lag, end int64
						for _, p := range gl.Partitions {
							if p.Topic == in.Input {
								lag += max(p.Lag, 0)
								end += p.End
							}
						}
						bar.update(end-lag, end, fmt.Sprintf("lag %d", lag))
						if lag == 0 && end > 0 {
							break
						}
					}
				}
				select {
				case <-ctx.Done():
					bar.finish()
					return nil, fmt.Errorf("silver did not catch up: %w", ctx.Err())
				case <-time.After(300 * time.Millisecond):
				}
			}
			bar.finish()
			var rows []demoRow
			for _, tbl := range []string{"ta_silver", "sa_silver"} {
				var n int64
				if err := env.DB.QueryRow(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil {
					return nil, err
				}
				rows = append(rows, demoRow{"silver", "rows in " + tbl, n})
			}
			perRule := map[string]int64{}
			err := dlq.Inspect(ctx, env.Kafka, in.DLQ, dlq.Filter{}, 0, func(r dlq.Record) error {
				k := r.Reason
				if r.Rule != "" {
					k += " " + r.Rule
				}
				perRule[k]++
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", in.DLQ, err)
			}
			keys := make([]string, 0, len(perRule))
			for k := range perRule {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				rows = append(rows, demoRow{"silver", in.DLQ + " " + k, perRule[k]})
			}
			return rows, nil
		},
	}
}
