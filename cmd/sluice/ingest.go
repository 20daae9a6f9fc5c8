package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/topics"
)

// ingestOptions are the flags shared by the ingest subcommands.
type ingestOptions struct {
	tasksTopic, jobsTopic string
	sessionLength         time.Duration
}

// register adds --jobs-topic to cmd, and with tasks (a command that sends
// tasks) --tasks-topic and --session-length.
func (o *ingestOptions) register(cmd *cobra.Command, tasks bool) {
	f := cmd.Flags()
	f.StringVar(&o.jobsTopic, "jobs-topic", topics.IngestJobs, "ticks job-state topic (compacted, co-partitioned with the task topic)")
	if tasks {
		f.StringVar(&o.tasksTopic, "tasks-topic", topics.IngestTasks, "ticks task topic")
		f.DurationVar(&o.sessionLength, "session-length", 0, "synthetic source: session length (default 6h30m; the demo uses minutes)")
	}
}

// validate rejects flag values the synthetic source would silently replace.
func (o *ingestOptions) validate() error {
	if o.sessionLength < 0 {
		return fmt.Errorf("invalid --session-length %v (want ≥ 0; 0 means 6h30m)", o.sessionLength)
	}
	return nil
}

func (o *ingestOptions) config() ticks.Config {
	return ticks.Config{
		TasksTopic: o.tasksTopic, JobsTopic: o.jobsTopic,
		Source: ticks.NewSynthetic(ticks.SyntheticConfig{Length: o.sessionLength}),
	}
}

func newIngestCmd(g *globalConfig) *cobra.Command {
	o := &ingestOptions{}
	cmd := commandGroup("ingest", "Trigger and inspect ticks ingestion jobs (pipeline ticks)",
		newIngestTriggerCmd(g, o), newIngestStatusCmd(g, o), newIngestBootstrapCmd(g, o))
	return cmd
}

func newIngestTriggerCmd(g *globalConfig, o *ingestOptions) *cobra.Command {
	var account, api string
	cmd := &cobra.Command{
		Use:   "trigger SYMBOL DATE",
		Short: "Start a new instance of the job SYMBOL:DATE and print its job_instance_id",
		Long: `trigger asks the tick source for the session's trading hours and sends a
trigger command on the task topic; the worker owning the job's partition
starts the new instance, and queued tasks of an older instance become
zombies. With --api the request goes to a running process's
POST /api/v1/ingest/trigger instead of straight to Kafka, with
Authorization: Bearer $SLUICE_API_TOKEN when it is set.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			req := ticks.TriggerRequest{Symbol: args[0], Date: args[1], AccountID: account}
			var res ticks.TriggerResult
			var err error
			if api != "" {
				res, err = triggerHTTP(cmd.Context(), api, req)
			} else {
				res, err = triggerKafka(cmd.Context(), g, o, req)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %s instance %s session %s → %s\n", res.JobKey, res.JobInstanceID,
				time.UnixMilli(res.StartTime).UTC().Format(time.RFC3339), time.UnixMilli(res.EndTime).UTC().Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().StringVar(&account, "account", envOr("TICKS_ACCOUNT", "default"), "account_id whose rate limit the job uses (env TICKS_ACCOUNT)")
	cmd.Flags().StringVar(&api, "api", "", "base URL of a running sluice ops server, e.g. http://127.0.0.1:9464")
	o.register(cmd, true)
	return g.withServiceFlags(cmd, kafkaFlags)
}

func triggerKafka(ctx context.Context, g *globalConfig, o *ingestOptions, req ticks.TriggerRequest) (ticks.TriggerResult, error) {
	// Bad input is reported before connecting, as the coordinator would.
	if err := errors.Join(ticks.ValidateSymbol(req.Symbol), ticks.ValidateDate(req.Date), ticks.ValidateAccount(req.AccountID)); err != nil {
		return ticks.TriggerResult{}, err
	}
	return withKafkaClient(ctx, g, func(ctx context.Context, cl *kgo.Client, kopts []kgo.Opt) (ticks.TriggerResult, error) {
		return ticks.NewCoordinator(cl, kopts, o.config()).Trigger(ctx, req)
	})
}

func triggerHTTP(ctx context.Context, base string, req ticks.TriggerRequest) (ticks.TriggerResult, error) {
	var res ticks.TriggerResult
	err := postAPI(ctx, "trigger", base, "/api/v1/ingest/trigger", req, &res)
	return res, err
}

func newIngestStatusCmd(g *globalConfig, o *ingestOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [JOB]",
		Short: "Show job states: status, cursor, progress through the session, heartbeat age",
		Long:  "status reads the compacted job-state topic to its end. JOB is SYMBOL:YYYY-MM-DD; without it every job is listed.",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if _, _, err := ticks.SplitJobKey(args[0]); err != nil {
					return err
				}
			}
			kopts, err := kafkaOpts(cmd.Context(), g)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			all, err := ticks.ReadJobs(ctx, kopts, o.jobsTopic, nil)
			if err != nil {
				return err
			}
			jobs := ticks.Flatten(all)
			var list []ticks.JobState
			if len(args) == 1 {
				st := jobs[args[0]]
				if st == nil {
					return fmt.Errorf("no job %s in %s", args[0], o.jobsTopic)
				}
				list = append(list, *st)
			} else {
				for _, st := range jobs {
					list = append(list, *st)
				}
			}
			return printJobs(cmd.OutOrStdout(), list, asJSON, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, one state per line")
	o.register(cmd, false)
	return g.withServiceFlags(cmd, kafkaFlags)
}

// printJobs prints job states sorted by key.
func printJobs(w io.Writer, list []ticks.JobState, asJSON bool, now time.Time) error {
	sortJobs(list)
	if asJSON {
		enc := json.NewEncoder(w)
		for _, st := range list {
			if err := enc.Encode(st); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATUS\tINSTANCE\tCURSOR\tPROGRESS\tHEARTBEAT AGE\tSEGMENTS\tTICKS\tLAST ERROR")
	for _, st := range list {
		cursor := "-"
		if st.Cursor >= st.StartTime {
			cursor = time.UnixMilli(st.Cursor).UTC().Format("15:04:05.000Z")
		}
		age := now.Sub(time.UnixMilli(st.HeartbeatAt)).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f%%\t%s\t%d\t%d\t%s\n", st.JobKey, st.Status, st.JobInstanceID, cursor,
			100*st.Progress(), age, st.Segments, st.Ticks, orDash(st.LastErrorType))
	}
	return tw.Flush()
}

func sortJobs(list []ticks.JobState) {
	for i := 1; i < len(list); i++ {
		for j := i; j > 0 && list[j].JobKey < list[j-1].JobKey; j-- {
			list[j], list[j-1] = list[j-1], list[j]
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newIngestBootstrapCmd(g *globalConfig, o *ingestOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Rebuild lost job states from the object store's segment files and backfill gaps",
		Long: `bootstrap lists ticks/ in the object store, and for every job with segment
files but no state on the job-state topic it sends a rebuilt state (instance
of the latest file, cursor at the end of the covered ranges) and one
backfill task per hole. A running ticks worker applies them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			env, cl, closeEnv, err := g.buildEnvClient(cmd.Context(), needs{objects: true})
			defer closeEnv()
			if err != nil {
				return err
			}
			cfg := o.config()
			sup := ticks.NewSupervisor(cfg, ticks.NewCoordinator(cl, env.Kafka, cfg), env.Objects, env.Logger)
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			rep, err := sup.Bootstrap(ctx)
			fmt.Fprintf(cmd.OutOrStdout(), "rebuilt %d job(s) %v, %d backfill task(s)\n", len(rep.Rebuilt), rep.Rebuilt, rep.Gaps)
			if err != nil {
				return err
			}
			if len(rep.Unreadable) > 0 {
				return errors.New("unreadable segment files: " + strings.Join(rep.Unreadable, ", "))
			}
			return nil
		},
	}
	o.register(cmd, true)
	return g.withServiceFlags(cmd, kafkaFlags|objectFlags)
}
