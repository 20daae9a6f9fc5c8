package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/trades"
)

// newTradesSimCmd is `sluice trades sim USER TRADE_ID [--horizon-days 7]
// [--json]`: the sim computed in process against DATABASE_URL (trades,
// market_bars) and REDIS_URL (cache, vendor rate limiter), as the API
// route GET /api/v1/trades/{user_id}/trades/{trade_id}/sim answers it.
func newTradesSimCmd(g *globalConfig) *cobra.Command {
	var horizon int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "sim USER TRADE_ID",
		Short: "Compare holding a trade for a horizon with what the user did (hold vs actual P/L)",
		Long: `sim reads the trade and the user's FIFO history in its symbol from
PostgreSQL, the 1 h closes of the horizon from market_bars (else from the
deterministic synthetic vendor behind the marketdata rate limiter), and
prints the hold and actual P/L curves and delta = hold − actual (fees
excluded). Answers are cached in Redis for an hour under
sim:{user}:{trade}:{horizon}:{source}. A horizon reaching past now, or a
vendor still rate limited after retries at 1 s and 5 s, gives a partial
answer with coverage < 1.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if horizon < trades.MinSimHorizonDays || horizon > trades.MaxSimHorizonDays {
				return fmt.Errorf("invalid --horizon-days %d: %w", horizon, trades.ErrSimHorizon)
			}
			sim, closeAll, err := g.openSim(cmd.Context())
			defer closeAll()
			if err != nil {
				return err
			}
			res, err := sim.Run(cmd.Context(), args[0], args[1], horizon)
			if errors.Is(err, trades.ErrTradeNotFound) {
				return fmt.Errorf("unknown trade %s of user %s", args[1], args[0])
			}
			if err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			return printSim(cmd.OutOrStdout(), res)
		},
	}
	cmd.Flags().IntVar(&horizon, "horizon-days", trades.DefaultSimHorizonDays,
		fmt.Sprintf("horizon in days, %d to %d", trades.MinSimHorizonDays, trades.MaxSimHorizonDays))
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the answer as JSON")
	return g.withServiceFlags(cmd, postgresFlags|redisFlags)
}

// openSim connects to PostgreSQL and Redis and returns a sim on them; the
// function it returns closes both (also after an error).
func (g *globalConfig) openSim(ctx context.Context) (*trades.Sim, func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if err := g.needDatabase(); err != nil {
		return nil, closeAll, err
	}
	pool, err := connectPostgres(ctx, g.DatabaseURL)
	if err != nil {
		return nil, closeAll, err
	}
	closers = append(closers, pool.Close)
	rc, err := connectRedis(ctx, g.RedisURL)
	if err != nil {
		return nil, closeAll, err
	}
	closers = append(closers, func() { _ = rc.Close() })
	// A one-shot command exports no metrics: a private registry.
	sim, err := trades.NewSimFromEnv(ctx, pipelines.Env{DB: pool, Redis: rc, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return nil, closeAll, err
	}
	return sim, closeAll, nil
}

// printSim writes the answer as a header and a table of the curves.
func printSim(w io.Writer, res trades.SimResult) error {
	delta := "n/a (no bars)"
	if res.Delta != nil {
		delta = res.Delta.StringFixedBank(trades.PnLPlaces)
	}
	fmt.Fprintf(w, "trade %s (%s %s) of %s, horizon %d d, bars from %s, cached %v\n",
		res.TradeID, res.Side, res.Symbol, res.UserID, res.HorizonDays, res.Source, res.Cached)
	fmt.Fprintf(w, "delta %s (hold − actual, fees excluded), coverage %s, partial %v\n",
		delta, strconv.FormatFloat(res.Coverage, 'f', -1, 64), res.Partial)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TS\tHOLD\tACTUAL\t")
	for _, p := range res.Curves {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", p.TS.Format(time.RFC3339),
			p.Hold.StringFixedBank(trades.PnLPlaces), p.Actual.StringFixedBank(trades.PnLPlaces))
	}
	return tw.Flush()
}
