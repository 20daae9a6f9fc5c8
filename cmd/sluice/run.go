package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/pipelines/smap"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/stages/run"
	"github.com/sluicehq/sluice/topics"
)

// pipelineSpec says how to build a named pipeline and what it connects to.
type pipelineSpec struct {
	needs needs
	doc   string
	// topics are the catalog topics the pipeline reads and writes; they
	// must exist before it starts (sluice topics ensure creates them).
	topics []string
	build  func(env pipelines.Env) ([]pipelines.Service, error)
}

// pipelineSpecs lists the pipelines `sluice run` knows, built fresh per call.
func pipelineSpecs(o *runOptions) map[string]pipelineSpec {
	return map[string]pipelineSpec{
		"silver": {
			needs:  needs{db: true},
			topics: []string{topics.BronzeRecords, topics.BronzeDLQ, topics.ControlFlags},
			doc:    "bronze.records → validate → ta_silver/sa_silver upsert, bronze.dlq; SCRAPE_SLOW backlog flag",
			build: func(env pipelines.Env) ([]pipelines.Service, error) {
				return silver.Services(env, silver.Config{Group: o.group("silver"), BacklogThreshold: o.backlogThreshold,
					Topic: o.topic(topics.BronzeRecords), DLQTopic: o.topic(topics.BronzeDLQ), FlagsTopic: o.topic(topics.ControlFlags),
					Runtime: run.Config{Window: run.WindowConfig{MaxKeys: o.silverWindowKeys, MaxTotalKeys: o.silverWindowTotalKeys}}})
			},
		},
		"ticks": {
			needs:  needs{redis: true, objects: true},
			topics: []string{topics.IngestTasks, topics.IngestJobs, topics.IngestDLQ},
			doc:    "ingest.tasks → rate-limited fetch → Parquet segments → object store; job state in ingest.jobs; supervisor",
			build: func(env pipelines.Env) ([]pipelines.Service, error) {
				return ticks.Services(env, ticks.Config{Group: o.group("ticks"), Supervisor: ticks.SupervisorConfig{Enabled: true},
					TasksTopic: o.topic(topics.IngestTasks), JobsTopic: o.topic(topics.IngestJobs), DLQTopic: o.topic(topics.IngestDLQ)})
			},
		},
		"smap": {
			needs: needs{db: true, redis: true, objects: true},
			topics: []string{topics.SmapProjectCreated, topics.SmapDataCollected, topics.SmapAnalysisFinished,
				topics.SmapJobCompleted, topics.SmapAnalyticsErrors},
			doc: "smap.project.created → collector → analytics → progress counter → smap.job.completed",
			build: func(env pipelines.Env) ([]pipelines.Service, error) {
				return smap.Services(env, smap.Config{
					CollectorGroup: o.group("smap-collector"), AnalyticsGroup: o.group("smap-analytics"), ProgressGroup: o.group("smap-progress"),
					ProjectCreatedTopic: o.topic(topics.SmapProjectCreated), DataCollectedTopic: o.topic(topics.SmapDataCollected),
					AnalysisFinishedTopic: o.topic(topics.SmapAnalysisFinished), JobCompletedTopic: o.topic(topics.SmapJobCompleted),
					AnalyticsErrorsTopic: o.topic(topics.SmapAnalyticsErrors),
				})
			},
		},
	}
}

type runOptions struct {
	opsAddr               string
	groupPrefix           string
	topicPrefix           string
	backlogThreshold      int64
	silverWindowKeys      int
	silverWindowTotalKeys int
	envErr                error // an environment variable that is not a valid flag value
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

func (o *runOptions) group(name string) string { return o.groupPrefix + name }

// topic is the name of a catalog topic with --topic-prefix, the prefix
// sluice topics ensure --prefix created it with.
func (o *runOptions) topic(name string) string { return o.topicPrefix + name }

func newRunCmd(g *globalConfig) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run PIPELINE...",
		Short: "Run pipelines as members of their consumer groups (start more processes to scale out)",
		Args:  cobra.MinimumNArgs(1),
		Long:  "Runs the named pipelines until SIGINT/SIGTERM, then finishes in-flight batches, commits and leaves the group.\nPipelines: " + strings.Join(pipelineNames(o), ", "),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.envErr != nil {
				return o.envErr
			}
			// silver would replace a threshold ≤ 0 by its default silently.
			if slices.Contains(args, "silver") && o.backlogThreshold < 1 {
				return fmt.Errorf("invalid backlog threshold %d (--backlog-threshold or BACKLOG_THRESHOLD; want ≥ 1)", o.backlogThreshold)
			}
			return runPipelines(cmd.Context(), g, o, args)
		},
	}
	cmd.Flags().StringVar(&o.opsAddr, "ops-addr", envOr("OPS_ADDR", "127.0.0.1:9464"), "ops HTTP address for /metrics, /healthz, /readyz and pipeline APIs (env OPS_ADDR)")
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
	return cmd
}

func pipelineNames(o *runOptions) []string {
	var names []string
	for n := range pipelineSpecs(o) {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// runPipelines builds the named pipelines on one environment and runs them
// until ctx is done or one fails.
func runPipelines(ctx context.Context, g *globalConfig, o *runOptions, names []string) error {
	specs := pipelineSpecs(o)
	var n needs
	seen := map[string]bool{}
	for _, name := range names {
		s, ok := specs[name]
		if !ok {
			return fmt.Errorf("unknown pipeline %q (known: %s)", name, strings.Join(pipelineNames(o), ", "))
		}
		if seen[name] {
			// One process runs a pipeline once (its metrics and ops routes
			// exist once); scale out with more processes.
			return fmt.Errorf("pipeline %q is named twice; to run more members of its group, start more processes", name)
		}
		seen[name] = true
		n.db = n.db || s.needs.db
		n.redis = n.redis || s.needs.redis
		n.objects = n.objects || s.needs.objects
	}
	env, closeEnv, err := g.buildEnv(ctx, n)
	defer closeEnv()
	if err != nil {
		return err
	}
	if err := checkPipelineTopics(ctx, env, o, specs, names); err != nil {
		return err
	}
	var services []pipelines.Service
	for _, name := range names {
		ss, err := specs[name].build(env)
		if err != nil {
			return fmt.Errorf("pipeline %s: %w", name, err)
		}
		services = append(services, ss...)
	}
	return serve(ctx, env, o.opsAddr, services, nil)
}

// checkPipelineTopics fails when a topic of the named pipelines is missing:
// a consumer group on a missing topic waits silently for ever.
func checkPipelineTopics(ctx context.Context, env pipelines.Env, o *runOptions, specs map[string]pipelineSpec, names []string) error {
	cl, err := kgo.NewClient(env.Kafka...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	var all []string
	for _, name := range names {
		for _, t := range specs[name].topics {
			all = append(all, o.topic(t))
		}
	}
	cctx, cancel := context.WithTimeout(ctx, kafkaConnectTimeout)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(cctx, all...)
	if err != nil {
		return fmt.Errorf("describe the pipelines' topics: %w", err)
	}
	for _, name := range names {
		var missing []string
		for _, t := range specs[name].topics {
			t = o.topic(t)
			d, ok := td[t]
			if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
				missing = append(missing, t)
			} else if d.Err != nil {
				return fmt.Errorf("pipeline %s: topic %s: %w", name, t, d.Err)
			}
		}
		if len(missing) > 0 {
			hint := "sluice topics ensure"
			if o.topicPrefix != "" {
				hint += " --prefix " + o.topicPrefix
			}
			return fmt.Errorf("pipeline %s: topic(s) %s do not exist (run %s)", name, strings.Join(missing, ", "), hint)
		}
	}
	return nil
}

// serve runs services and the ops HTTP server until ctx is done or a
// service fails. listening, when not nil, is called with the address the
// ops server bound (the port chosen for a port-0 opsAddr) before any
// service starts; it is not called when the ops server is disabled or
// fails to listen.
func serve(ctx context.Context, env pipelines.Env, opsAddr string, services []pipelines.Service, listening func(net.Addr)) error {
	grp, gctx := errgroup.WithContext(ctx)
	if opsAddr != "" && env.Ops != nil {
		for _, s := range services {
			env.Ops.AddReadiness(s.Name(), s.Ready)
		}
		addr, errc, err := env.Ops.ListenAndServe(gctx, opsAddr)
		if err != nil {
			return err
		}
		env.Logger.Info("ops endpoints", "metrics", fmt.Sprintf("http://%s/metrics", addr), "ready", fmt.Sprintf("http://%s/readyz", addr))
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
