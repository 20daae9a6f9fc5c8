package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/topics"
)

// tradesRequester connects to Kafka and returns a requester on the trades
// topics under prefix (sluice run --topic-prefix), and its closer.
func tradesRequester(ctx context.Context, g *globalConfig, prefix string) (*trades.Requester, func(), error) {
	kopts, err := kafkaOpts(ctx, g)
	if err != nil {
		return nil, func() {}, err
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, func() {}, err
	}
	return trades.NewRequester(cl, prefix+topics.TradesEvents, prefix+topics.TradesBias), cl.Close, nil
}

func newTradesScoreCmd(g *globalConfig) *cobra.Command {
	var since, prefix string
	cmd := &cobra.Command{
		Use:   "score USER --since DATE",
		Short: "Ask trades-score to score USER's trades since DATE (a score.request on trades.events)",
		Long: `score sends a score.request {user_id, since} keyed by USER on trades.events.
trades-score labels USER's trades with ts ≥ DATE (YYYY-MM-DD or RFC 3339, not
after today UTC) against the whole history, writes bias_tags and publishes
trade.scored and, per changed label set, coach.reflect. Prints the event id.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if since == "" {
				return errors.New("--since is required")
			}
			q, closeQ, err := tradesRequester(cmd.Context(), g, prefix)
			defer closeQ()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			sent, err := q.Score(ctx, args[0], since, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "score.request %s sent (%s/%d@%d)\n", sent.EventID, sent.Topic, sent.Partition, sent.Offset)
			return nil
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "score trades with ts ≥ this date (YYYY-MM-DD or RFC 3339)")
	cmd.Flags().StringVar(&prefix, "topic-prefix", "", "prefix of the trades topics (as sluice run --topic-prefix)")
	return g.withServiceFlags(cmd, kafkaFlags)
}

func newTradesDigestCmd(g *globalConfig) *cobra.Command {
	var week, prefix, api string
	cmd := &cobra.Command{
		Use:   "digest USER --week YYYY-Www",
		Short: "Ask trades-digest to emit USER's digest of an ISO week now (a digest.request)",
		Long: `digest sends a digest.request {user_id, period_start} keyed by USER on
trades.bias; trades-digest emits the week's digest at once (partial when the
week has not ended; all zeros without trades): the object
digests/USER/START-END.json, the digests row and digest.ready. With --api the
request goes to a running process's POST /api/v1/trades/digests instead,
with Authorization: Bearer $SLUICE_API_TOKEN when it is set.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := trades.ParseISOWeek(week)
			if err != nil {
				return err
			}
			if err := trades.CheckUserID(args[0]); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			var sent trades.Sent
			if api != "" {
				sent, err = digestHTTP(ctx, api, trades.DigestsRequest{UserID: args[0], Week: week})
			} else {
				q, closeQ, qerr := tradesRequester(cmd.Context(), g, prefix)
				defer closeQ()
				if qerr != nil {
					return qerr
				}
				sent, err = q.Digest(ctx, args[0], w, time.Now())
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "digest.request %s sent for %s %s..%s\n", sent.EventID, args[0], w.StartDate(), w.EndDate())
			return nil
		},
	}
	cmd.Flags().StringVar(&week, "week", "", "ISO week, e.g. 2025-W02")
	cmd.Flags().StringVar(&prefix, "topic-prefix", "", "prefix of the trades topics (as sluice run --topic-prefix)")
	cmd.Flags().StringVar(&api, "api", "", "base URL of a running sluice ops server, e.g. http://127.0.0.1:9464")
	return g.withServiceFlags(cmd, kafkaFlags)
}

func digestHTTP(ctx context.Context, base string, req trades.DigestsRequest) (trades.Sent, error) {
	var res trades.DigestsAccepted
	err := postAPI(ctx, "trades digest", base, "/api/v1/trades/digests", req, &res)
	return res.Sent, err
}

func newTradesRebuildDigestsCmd(g *globalConfig) *cobra.Command {
	var since, prefix string
	cmd := &cobra.Command{
		Use:   "rebuild-digests USER [--since DATE]",
		Short: "Re-publish trade.scored for USER's trades from Postgres (trades-digest rebuilds its windows)",
		Long: `rebuild-digests scores USER's trades in Postgres as trades-score does (the
whole history, the trades with ts ≥ DATE kept; all of them without --since)
and re-publishes their trade.scored on trades.bias with the same payloads and
event ids. trades-digest takes every changed contribution as a new revision
of its window and ignores unchanged ones; windows past the digest horizon
are refused (trades.digest_window_expired). Prints the count.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var from time.Time
			if since != "" {
				var err error
				if from, err = trades.CheckSince(since, time.Now()); err != nil {
					return err
				}
			}
			if err := trades.CheckUserID(args[0]); err != nil {
				return err
			}
			if err := g.needDatabase(); err != nil {
				return err
			}
			pool, err := connectPostgres(cmd.Context(), g.DatabaseURL)
			if err != nil {
				return err
			}
			defer pool.Close()
			q, closeQ, err := tradesRequester(cmd.Context(), g, prefix)
			defer closeQ()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			n, err := q.RebuildDigests(ctx, pool, args[0], from, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d trade.scored re-published for %s\n", n, args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "only trades with ts ≥ this date (YYYY-MM-DD or RFC 3339)")
	cmd.Flags().StringVar(&prefix, "topic-prefix", "", "prefix of the trades topics (as sluice run --topic-prefix)")
	return g.withServiceFlags(cmd, kafkaFlags|postgresFlags)
}
