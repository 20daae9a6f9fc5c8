package trades

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/stages/ratelimit"
)

// NewSimFromEnv returns the production sim on env: trades and market_bars
// from env.DB, the cache and the marketdata rate limiter (ratelimit's
// default windows, account = symbol) on env.Redis, the deterministic
// synthetic vendor behind it, metrics on env.Registerer. Mount it with
//
//	for pattern, h := range sim.Routes() { env.Ops.Handle(pattern, h) }
func NewSimFromEnv(ctx context.Context, env pipelines.Env) (*Sim, error) {
	if env.DB == nil || env.Redis == nil {
		return nil, errors.New("trades sim: needs PostgreSQL (DATABASE_URL) and Redis (REDIS_URL)")
	}
	lim, err := ratelimit.New(ctx, env.Redis, ratelimit.Config{Source: SourceMarketData}, env.Registerer)
	if err != nil {
		return nil, fmt.Errorf("trades sim: marketdata rate limiter: %w", err)
	}
	return NewSim(SimConfig{
		Trades: PGTrades{DB: env.DB}, Stored: PGMarketBars{DB: env.DB},
		Vendor: LimitedVendor{Limiter: lim, Vendor: SyntheticMarketData{}},
		Cache:  env.Redis, Registerer: env.Registerer,
	})
}
