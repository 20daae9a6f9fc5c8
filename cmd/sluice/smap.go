package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/smap"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages/progress"
	"github.com/sluicehq/sluice/topics"
)

func newSmapCmd(g *globalConfig) *cobra.Command {
	return commandGroup("smap", "smap pipeline commands (seed 001): project progress and its repair",
		newSmapProgressCmd(g), newSmapRebuildCmd(g))
}

func newSmapProgressCmd(g *globalConfig) *cobra.Command {
	var asJSON bool
	var interval time.Duration
	var prefix string
	cmd := &cobra.Command{
		Use:   "progress PROJECT_ID",
		Short: "Show a project's progress with a live progress bar until it is DONE",
		Long: `progress reads the project's progress from Redis (DB 1, hash smap:proj:ID)
and redraws a progress bar until the project is DONE; Ctrl-C stops watching.
A project that does not exist (or whose progress expired) fails at once.
--json prints {status,total,processed,errors,percent} once instead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(args[0]) == "" {
				return errors.New("empty PROJECT_ID")
			}
			if interval <= 0 {
				return fmt.Errorf("invalid --interval %v (want > 0)", interval)
			}
			if g.RedisURL == "" {
				return errors.New("no Redis: set REDIS_URL or --redis-url")
			}
			opt, err := parseRedisURL(g.RedisURL)
			if err != nil {
				return err
			}
			base := redis.NewClient(opt)
			defer base.Close()
			cfg := smap.Config{KeyPrefix: prefix}
			rdb, closeState := smap.StateClient(base, cfg)
			defer closeState()
			tr, err := smap.NewTracker(rdb, cfg)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			id := args[0]
			if asJSON {
				st, err := tr.Get(ctx, id)
				if err != nil {
					return err
				}
				b, err := json.Marshal(smap.ProgressOf(st))
				if err != nil {
					return err
				}
				fmt.Fprintln(out, string(b))
				if st.Status == progress.StatusNotFound {
					return fmt.Errorf("project %s not found", id)
				}
				return nil
			}
			bar := newProgressBar(out, id)
			// A project that is not (or no longer) in Redis never becomes
			// DONE: stop watching as soon as a poll says so.
			wctx, stopWatch := context.WithCancel(ctx)
			defer stopWatch()
			notFound := false
			p, err := smap.WatchProgress(wctx, tr, id, interval, func(p smap.Progress) {
				if p.Status == progress.StatusNotFound {
					notFound = true
					stopWatch()
					return
				}
				bar.draw(p.Percent, p.Processed, p.Total, fmt.Sprintf("%s errors=%d", p.Status, p.Errors)) // the API's percent: 100 for an empty DONE project, below 100 while items remain
			})
			bar.finish()
			if notFound {
				return fmt.Errorf("project %s not found", id)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "project %s %s: %d/%d processed, %d errors (%.2f%%)\n", id, p.Status, p.Processed, p.Total, p.Errors, p.Percent)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the progress once as JSON")
	cmd.Flags().DurationVar(&interval, "interval", 500*time.Millisecond, "refresh period of the progress bar")
	cmd.Flags().StringVar(&prefix, "key-prefix", smap.DefaultKeyPrefix, "Redis key prefix of the progress state")
	return g.withServiceFlags(cmd, redisFlags)
}

func newSmapRebuildCmd(g *globalConfig) *cobra.Command {
	var prefix, completedTopic string
	cmd := &cobra.Command{
		Use:   "rebuild-progress PROJECT_ID",
		Short: "Rebuild a project's Redis progress from post_analytics and its project record",
		Long: `rebuild-progress replaces the project's progress state in Redis (DB 1) with
what the systems of record hold: every item in post_analytics (failed items
count as errors) and the sealed total and completion time from the
project's record in the object store (projects/ID.json). Use it when Redis
lost the state (flushed, evicted, expired). When the rebuilt project is
complete and its completion was never published, smap.job.completed is
published now on --job-completed-topic (same event id as the original would
have had).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(args[0]) == "" {
				return errors.New("empty PROJECT_ID")
			}
			ctx := cmd.Context()
			env, closeEnv, err := g.buildEnv(ctx, needs{db: true, redis: true, objects: true})
			defer closeEnv()
			if err != nil {
				return err
			}
			// A project the systems of record know nothing of (a typo) would
			// be "rebuilt" as a fresh INITIALIZING state that never ends.
			if err := smapProjectKnown(ctx, env, args[0]); err != nil {
				return err
			}
			st, err := smap.RebuildProgress(ctx, env, smap.Config{KeyPrefix: prefix, JobCompletedTopic: completedTopic}, args[0])
			if err != nil {
				return err
			}
			p := smap.ProgressOf(st)
			fmt.Fprintf(cmd.OutOrStdout(), "project %s rebuilt: %s, %d/%d processed, %d errors (%.2f%%), sealed=%t\n",
				args[0], p.Status, p.Processed, p.Total, p.Errors, p.Percent, st.Sealed)
			return nil
		},
	}
	cmd.Flags().StringVar(&prefix, "key-prefix", smap.DefaultKeyPrefix, "Redis key prefix of the progress state")
	cmd.Flags().StringVar(&completedTopic, "job-completed-topic", topics.SmapJobCompleted,
		"topic a completion is published on (P"+topics.SmapJobCompleted+" for a copy run with sluice run --topic-prefix P)")
	return g.withServiceFlags(cmd, allServiceFlags)
}

// smapProjectKnown fails unless the project has its record in the object
// store (projects/ID.json, written by the collector when it starts the
// project) or rows in post_analytics.
func smapProjectKnown(ctx context.Context, env pipelines.Env, id string) error {
	key := "projects/" + url.PathEscape(id) + ".json"
	_, err := env.Objects.Stat(ctx, key)
	if err == nil {
		return nil
	}
	if !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("project %s: read its record %s: %w", id, key, err)
	}
	var analysed bool
	if err := env.DB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM post_analytics WHERE project_id = $1)`, id).Scan(&analysed); err != nil {
		return fmt.Errorf("project %s: read post_analytics: %w", id, err)
	}
	if !analysed {
		return fmt.Errorf("project %s not found: no %s in the object store and no rows in post_analytics; nothing to rebuild", id, key)
	}
	return nil
}
