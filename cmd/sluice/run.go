package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/modules"
	"github.com/sluicehq/sluice/pipelines/registry"
	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/stages/run"
	"github.com/sluicehq/sluice/topics"
)

// runSpecs returns the declarations of every pipeline with o's settings.
func runSpecs(o *runOptions) []pipelines.Spec {
	tradesCfg, tradesErr := tradesSettings()
	o.tradesErr = tradesErr
	return registry.All(registry.Settings{
		Silver: silver.Config{BacklogThreshold: o.backlogThreshold,
			Runtime: run.Config{Window: run.WindowConfig{MaxKeys: o.silverWindowKeys, MaxTotalKeys: o.silverWindowTotalKeys}}},
		Ticks:   ticks.Config{Supervisor: ticks.SupervisorConfig{Enabled: true}},
		Trades:  tradesCfg,
		Modules: modules.Config{Getenv: os.Getenv},
	})
}

type runOptions struct {
	// consoleAddr, when set, serves the web console alongside (sluice console).
	consoleAddr           string
	opsAddr               string
	apiHosts              []string
	insecureOpenAPI       bool
	tlsCert, tlsKey       string
	instanceID            string
	groupPrefix           string
	topicPrefix           string
	backlogThreshold      int64
	silverWindowKeys      int
	silverWindowTotalKeys int
	memoryBudget          byteSize // 0: derived (run.BudgetFor)
	envErr                error    // an environment variable that is not a valid flag value
	tradesErr             error    // the trades pipeline's environment (tradesSettings), reported when it runs
}

// envFlag sets flag from the environment variable env when it is set; an
// invalid value is reported when the command runs.
func (o *runOptions) envFlag(cmd *cobra.Command, env, flag string) {
	v := envOr(env, "")
	if v == "" {
		return
	}
	if err := cmd.Flags().Set(flag, v); err != nil && o.envErr == nil {
		o.envErr = fmt.Errorf("invalid %s=%q: %w", env, v, err)
	}
}

// apiTokenEnv names the environment variable holding the bearer token of
// the ops server's write routes. It is not a flag: command lines are
// visible to every user of the host.
const apiTokenEnv = "SLUICE_API_TOKEN"

// apiToken is SLUICE_API_TOKEN without surrounding white space (a token
// read from a file often ends in a newline). The name is spelled out for
// deploy/check_deploy.py, which checks the variables the manifests set.
func apiToken() string { return strings.TrimSpace(os.Getenv("SLUICE_API_TOKEN")) }

// listen is the ops server's address and access rules.
func (o *runOptions) listen() opshttp.Listen {
	return opshttp.Listen{Addr: o.opsAddr, Token: apiToken(), Hosts: o.apiHosts, Open: o.insecureOpenAPI,
		CertFile: o.tlsCert, KeyFile: o.tlsKey}
}

// checkListen validates the ops server's settings before anything connects.
func (o *runOptions) checkListen() error {
	if o.opsAddr == "" {
		return nil
	}
	err := o.listen().Check()
	if errors.Is(err, opshttp.ErrUnauthenticated) {
		return fmt.Errorf("--ops-addr %s is reachable from other hosts and %s is not set: set it (clients send Authorization: Bearer <token>), or pass --insecure-open-api to accept unauthenticated writes", o.opsAddr, apiTokenEnv)
	}
	return err
}

// naming names the run's groups and topics: --group-prefix and
// --topic-prefix (the prefix sluice topics ensure --prefix created them
// with) before the declared names.
func (o *runOptions) naming() pipelines.Naming {
	return pipelines.Naming{GroupPrefix: o.groupPrefix, TopicPrefix: o.topicPrefix}
}

func newRunCmd(g *globalConfig) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run PIPELINE...",
		Short: "Run pipelines as members of their consumer groups (start more processes to scale out)",
		Args:  cobra.MinimumNArgs(1),
		Long:  "Runs the named pipelines until SIGINT/SIGTERM, then finishes in-flight batches, commits and leaves the group.\n\nPipelines:\n" + pipelineList(runSpecs(o)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.envErr != nil {
				return o.envErr
			}
			if slices.Contains(args, trades.Name) && o.tradesErr != nil {
				return o.tradesErr
			}
			if err := o.checkListen(); err != nil {
				return err
			}
			if o.consoleAddr != "" {
				if err := console.CheckAddr(o.consoleAddr, consoleToken()); err != nil {
					return err
				}
			}
			if err := checkInstanceID(o.instanceID); err != nil {
				return err
			}
			// silver would replace a threshold ≤ 0 by its default silently.
			if slices.Contains(args, silver.Name) && o.backlogThreshold < 1 {
				return fmt.Errorf("invalid backlog threshold %d (--backlog-threshold or BACKLOG_THRESHOLD; want ≥ 1)", o.backlogThreshold)
			}
			return runPipelines(cmd.Context(), g, o, args)
		},
	}
	cmd.Flags().StringVar(&o.opsAddr, "ops-addr", envOr("OPS_ADDR", "127.0.0.1:9464"), "ops HTTP address for /metrics, /healthz, /readyz and pipeline APIs; the APIs' write routes need Authorization: Bearer $"+apiTokenEnv+" when it is set, and a non-loopback address needs it (env OPS_ADDR)")
	cmd.Flags().StringSliceVar(&o.apiHosts, "api-host", nil, "host names clients use to reach the ops server's API (a Service or ingress name), besides its bound address; other Host headers are refused (env SLUICE_API_HOSTS, comma list)")
	o.envFlag(cmd, "SLUICE_API_HOSTS", "api-host")
	cmd.Flags().BoolVar(&o.insecureOpenAPI, "insecure-open-api", false, "allow a non-loopback --ops-addr without "+apiTokenEnv+" (the API's write routes then accept any caller)")
	cmd.Flags().StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate chain: the ops server speaks HTTPS (with --tls-key) (env OPS_TLS_CERT)")
	o.envFlag(cmd, "OPS_TLS_CERT", "tls-cert")
	cmd.Flags().StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert (env OPS_TLS_KEY)")
	o.envFlag(cmd, "OPS_TLS_KEY", "tls-key")
	cmd.Flags().StringVar(&o.instanceID, "instance-id", "", "static group membership: this process's members join their groups as instance <id>-<group>, and get their partitions back without a rebalance when restarted with the same id within the session timeout (45 s); unique per process, stable across restarts, e.g. a StatefulSet pod name (env KAFKA_INSTANCE_ID)")
	o.envFlag(cmd, "KAFKA_INSTANCE_ID", "instance-id")
	cmd.Flags().StringVar(&o.groupPrefix, "group-prefix", "", "prefix for every consumer group name (to run an isolated copy; see --topic-prefix)")
	cmd.Flags().StringVar(&o.topicPrefix, "topic-prefix", "", "prefix of every topic the pipelines read and write, as created by sluice topics ensure --prefix (to run an isolated copy on a shared cluster)")
	cmd.Flags().Int64Var(&o.backlogThreshold, "backlog-threshold", 10_000, "silver: lag above which SCRAPE_SLOW is set (env BACKLOG_THRESHOLD)")
	o.envFlag(cmd, "BACKLOG_THRESHOLD", "backlog-threshold")
	cmd.Flags().IntVar(&o.silverWindowKeys, "silver-window-keys", 0, fmt.Sprintf(
		"silver: keys per partition a coalescing window holds before it is written; bounds memory (0: default %d, -1: no window, write batch by batch) (env SILVER_WINDOW_KEYS)", silver.DefaultWindowMaxKeys))
	o.envFlag(cmd, "SILVER_WINDOW_KEYS", "silver-window-keys")
	cmd.Flags().IntVar(&o.silverWindowTotalKeys, "silver-window-total-keys", 0, fmt.Sprintf(
		"silver: keys the windows of all partitions of this process hold together before they are written; bounds memory when a process takes over many partitions (0: default %d, -1: no bound beyond --silver-window-keys) (env SILVER_WINDOW_TOTAL_KEYS)", silver.DefaultWindowMaxTotalKeys))
	o.envFlag(cmd, "SILVER_WINDOW_TOTAL_KEYS", "silver-window-total-keys")
	cmd.Flags().Var(&o.memoryBudget, "memory-budget", fmt.Sprintf(
		"memory for the records the pipelines hold (fetched, not yet processed) and their coalescing windows, shared by every pipeline of the process, e.g. 256MiB; when full, fetches pause and windows are written early (default: 35 %% of GOMEMLIMIT or of the cgroup's memory limit, whichever is lower, else %dMiB) (env MEMORY_BUDGET)", run.DefaultBudget>>20))
	o.envFlag(cmd, "MEMORY_BUDGET", "memory-budget")
	cmd.Flags().StringVar(&o.consoleAddr, "console", "", "also serve the web console (sluice console) on this address, e.g. 127.0.0.1:8080")
	return g.withServiceFlags(cmd, allServiceFlags)
}

// checkInstanceID validates --instance-id: Kafka accepts group instance
// ids of at most 249 letters, digits, '.', '_' and '-', and the id is
// followed by "-<group>".
func checkInstanceID(id string) error {
	if id == "" {
		return nil
	}
	ok := len(id) <= 200
	for _, c := range id {
		ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-')
	}
	if !ok {
		return fmt.Errorf("invalid --instance-id %q (KAFKA_INSTANCE_ID; want at most 200 letters, digits, '.', '_' or '-')", id)
	}
	return nil
}

// pipelineNames returns the names of specs, sorted.
func pipelineNames(specs []pipelines.Spec) []string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	sort.Strings(names)
	return names
}

// pipelineList is one line per pipeline, name and doc, sorted by name.
func pipelineList(specs []pipelines.Spec) string {
	specs = slices.Clone(specs)
	slices.SortFunc(specs, func(a, b pipelines.Spec) int { return strings.Compare(a.Name, b.Name) })
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, s := range specs {
		fmt.Fprintf(tw, "  %s\t%s\n", s.Name, s.Doc)
	}
	tw.Flush()
	return b.String()
}

// runPipelines builds the named pipelines on one environment and runs them
// until ctx is done or one fails.
func runPipelines(ctx context.Context, g *globalConfig, o *runOptions, names []string) error {
	all := runSpecs(o)
	var specs []pipelines.Spec
	for _, name := range names {
		i := slices.IndexFunc(all, func(s pipelines.Spec) bool { return s.Name == name })
		if i < 0 {
			return fmt.Errorf("unknown pipeline %q (known: %s)", name, strings.Join(pipelineNames(all), ", "))
		}
		if slices.ContainsFunc(specs, func(s pipelines.Spec) bool { return s.Name == name }) {
			// One process runs a pipeline once (its metrics and ops routes
			// exist once); scale out with more processes.
			return fmt.Errorf("pipeline %q is named twice; to run more members of its group, start more processes", name)
		}
		specs = append(specs, all[i])
	}
	env, closeEnv, err := g.buildEnv(ctx, needsOf(specs))
	defer closeEnv()
	if err != nil {
		return err
	}
	env.InstanceID = o.instanceID
	if err := checkPipelineTopics(ctx, env, o, specs); err != nil {
		return err
	}
	budget, from, softLimit := processBudget(int64(o.memoryBudget), g.ownsProcess, os.Getenv("GOMEMLIMIT"), run.CurrentMemoryLimits())
	if softLimit > 0 {
		debug.SetMemoryLimit(softLimit)
	}
	env.Memory = run.NewBudget(budget)
	env.Logger.Info("memory budget", "bytes", env.Memory.Limit(), "from", from, "go_memory_limit", debug.SetMemoryLimit(-1))
	set, err := pipelines.Build(env, o.naming(), specs)
	if err != nil {
		return err
	}
	defer set.Close()
	if o.consoleAddr == "" {
		return serve(ctx, env, o.listen(), set.Services, nil)
	}
	named := make([]pipelines.Spec, len(specs))
	for i, s := range specs {
		named[i] = o.naming().Apply(s)
	}
	cfg := consoleConfig(env, named)
	cfg.JobsTopic, cfg.FlagsTopic = o.naming().Topic(topics.IngestJobs), o.naming().Topic(topics.ControlFlags)
	cfg.TradesStateTopic = o.naming().Topic(topics.TradesImportState)
	c, ln, err := listenConsole(cfg, o.consoleAddr)
	if err != nil {
		return err
	}
	defer c.Close()
	env.Logger.Info("console", "url", "http://"+dialAddr(ln.Addr())+"/")
	cctx, stopConsole := context.WithCancel(ctx)
	consoleErr := make(chan error, 1)
	go func() { consoleErr <- c.Serve(cctx, ln) }()
	err = serve(ctx, env, o.listen(), set.Services, nil)
	stopConsole()
	return errors.Join(err, <-consoleErr)
}

// needsOf is what the pipelines of specs connect to together.
func needsOf(specs []pipelines.Spec) needs {
	n := pipelines.NeedsOf(specs)
	return needs{db: n.DB, redis: n.Redis, objects: n.Objects}
}

// checkPipelineTopics fails when a topic of the pipelines is missing: a
// consumer group on a missing topic waits silently for ever.
func checkPipelineTopics(ctx context.Context, env pipelines.Env, o *runOptions, specs []pipelines.Spec) error {
	cl, err := kgo.NewClient(env.Kafka...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	n := o.naming()
	var all []string
	for _, s := range specs {
		for _, t := range s.Topics() {
			all = append(all, n.Topic(t))
		}
	}
	cctx, cancel := context.WithTimeout(ctx, kafkaConnectTimeout)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(cctx, all...)
	if err != nil {
		return fmt.Errorf("describe the pipelines' topics: %w", err)
	}
	for _, s := range specs {
		var missing []string
		for _, t := range s.Topics() {
			t = n.Topic(t)
			d, ok := td[t]
			if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
				missing = append(missing, t)
			} else if d.Err != nil {
				return fmt.Errorf("pipeline %s: topic %s: %w", s.Name, t, d.Err)
			}
		}
		if len(missing) > 0 {
			hint := "sluice topics ensure"
			if o.topicPrefix != "" {
				hint += " --prefix " + o.topicPrefix
			}
			return fmt.Errorf("pipeline %s: topic(s) %s do not exist (run %s)", s.Name, strings.Join(missing, ", "), hint)
		}
	}
	return nil
}

// serve runs services and the ops HTTP server (on ops; an empty ops.Addr
// disables it) until ctx is done or a service fails. listening, when not
// nil, is called with the address the ops server bound (the port chosen for
// port 0) before any service starts; it is not called when the ops server
// is disabled or fails to listen.
func serve(ctx context.Context, env pipelines.Env, ops opshttp.Listen, services []pipelines.Service, listening func(net.Addr)) error {
	grp, gctx := errgroup.WithContext(ctx)
	if ops.Addr != "" && env.Ops != nil {
		for _, s := range services {
			env.Ops.AddReadiness(s.Name(), s.Ready)
		}
		addr, errc, err := env.Ops.ListenAndServe(gctx, ops)
		if err != nil {
			return err
		}
		scheme := "http"
		if ops.CertFile != "" {
			scheme = "https"
		}
		env.Logger.Info("ops endpoints", "metrics", fmt.Sprintf("%s://%s/metrics", scheme, addr), "ready", fmt.Sprintf("%s://%s/readyz", scheme, addr))
		if listening != nil {
			listening(addr)
		}
		grp.Go(func() error { return <-errc })
	}
	for _, s := range services {
		grp.Go(func() error {
			if err := s.Run(gctx); err != nil {
				return fmt.Errorf("%s: %w", s.Name(), err)
			}
			return nil
		})
	}
	err := grp.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// processBudget returns the memory budget of sluice run, where it comes
// from and the Go soft memory limit the process must set (0: none):
// run.ProcessBudget when the command owns its process (the sluice binary,
// not a test running it in-process), else run.BudgetFor.
func processBudget(explicit int64, ownsProcess bool, goMemLimitEnv string, l run.MemoryLimits) (budget int64, from string, softLimit int64) {
	if ownsProcess {
		return run.ProcessBudget(explicit, goMemLimitEnv, l)
	}
	budget, from = run.BudgetFor(explicit, l)
	return budget, from, 0
}
