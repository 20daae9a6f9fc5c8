package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/kconf"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/stages/ratelimit"
	"github.com/sluicehq/sluice/topics"
)

// sloResult is what slo prints: the import and sim latencies.
type sloResult struct {
	Imports         int     `json:"imports"`
	ImportTrades    []int   `json:"import_stored"`
	ImportP50MS     int64   `json:"import_p50_ms"`
	ImportP95MS     int64   `json:"import_p95_ms"`
	ImportMaxMS     int64   `json:"import_max_ms"`
	ImportAllMS     []int64 `json:"import_all_ms"`
	SimMisses       int     `json:"sim_misses"`
	SimMissP95MS    float64 `json:"sim_miss_p95_ms"`
	SimCalls        int     `json:"sim_cached_calls"`
	SimCachedHits   int     `json:"sim_cached_hits"`
	SimCachedP50MS  float64 `json:"sim_cached_p50_ms"`
	SimCachedP95MS  float64 `json:"sim_cached_p95_ms"`
	SimCachedMaxMS  float64 `json:"sim_cached_max_ms"`
	SimTradesPerRun int     `json:"sim_trades"`
}

// slo measures two of the seed's SLOs on the real stack, in this process:
//
//   - import: trades-import (ImportServices on the run's topics, group and
//     schema) runs here; imports synthetic imports of the default 500
//     trades since 30 days ago, for as many fresh users, are sent one after
//     the other (trades.Imports.Import), each timed from just before its
//     command is produced to its import.completed on the run's
//     trades.events;
//   - sim: Sim (the production wiring of NewSimFromEnv, with the rate
//     limiter's keys prefixed by the run's prefix) on the run's schema and
//     REDIS_URL: one uncached call per trade for 10 trades of the first
//     imported user, then sims cached calls cycling over them, each timed
//     around Sim.Run. The sim's cache keys (sim:{user}:…) and the limiter's
//     keys are deleted at the end.
func slo(ctx context.Context, seeds []string, f sluiceFlags, imports, sims int) error {
	if imports < 1 || sims < 1 {
		return errors.New("slo: --imports and --sims must be positive")
	}
	kc := kconf.FromEnv()
	kc.Brokers = seeds
	kopts, err := kc.Opts()
	if err != nil {
		return err
	}
	db, err := pool(ctx, f)
	if err != nil {
		return err
	}
	defer db.Close()
	ropts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg := prometheus.NewRegistry()
	env := pipelines.Env{Kafka: kopts, DB: db, Redis: rdb, Registerer: reg, Logger: log}
	icfg := trades.ImportConfig{
		Group: f.prefix + trades.ImportName, ImportTopic: f.prefix + topics.TradesImport,
		StateTopic: f.prefix + topics.TradesImportState, EventsTopic: f.prefix + topics.TradesEvents,
		DLQTopic: f.prefix + topics.TradesDLQ,
	}
	svcs, err := trades.ImportServices(env, icfg)
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, len(svcs))
	for _, s := range svcs {
		go func() { errc <- s.Run(sctx) }()
	}
	var res sloResult
	users, err := timeImports(ctx, seeds, kopts, icfg, imports, errc, &res)
	if err != nil {
		return err
	}
	stop()
	if err := timeSims(ctx, env, f, users[0], sims, &res); err != nil {
		return err
	}
	out, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// timeImports sends n imports one after the other and times each to its
// import.completed; it returns the users imported.
func timeImports(ctx context.Context, seeds []string, kopts []kgo.Opt, icfg trades.ImportConfig, n int, errc <-chan error, res *sloResult) ([]string, error) {
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(icfg.EventsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(0))
	if err != nil {
		return nil, err
	}
	defer prod.Close()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	cons.PollFetches(pctx) // resolves the start offsets before the first import
	cancel()
	imp := trades.NewImports(prod, kopts, icfg)
	since := time.Now().UTC().AddDate(0, 0, -30).Format(time.DateOnly)
	stamp := time.Now().UTC().Format("150405")
	var users []string
	var lat []time.Duration
	for i := range n {
		user := fmt.Sprintf("slo%s-u%02d", stamp, i)
		t0 := time.Now()
		r, err := imp.Import(ctx, trades.ImportRequest{UserID: user, Since: since, Broker: trades.BrokerSynthetic})
		if err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		stored := -1
		for stored < 0 {
			fs := cons.PollFetches(wctx)
			select {
			case err := <-errc:
				cancel()
				return nil, fmt.Errorf("trades-import stopped: %w", err)
			default:
			}
			if wctx.Err() != nil {
				cancel()
				return nil, fmt.Errorf("no import.completed for %s within 5m", r.ImportID)
			}
			fs.EachRecord(func(rec *kgo.Record) {
				e, err := trades.DecodeEvent(rec.Value)
				if err != nil || e.Type != trades.TypeImportCompleted {
					return
				}
				c, err := trades.DecodePayload[trades.ImportCompleted](e)
				if err == nil && c.ImportID == r.ImportID {
					stored = c.Stored
				}
			})
		}
		cancel()
		lat = append(lat, time.Since(t0))
		users = append(users, user)
		res.ImportTrades = append(res.ImportTrades, stored)
	}
	res.Imports = n
	res.ImportP50MS, res.ImportP95MS, res.ImportMaxMS = pct(lat, 50).Milliseconds(), pct(lat, 95).Milliseconds(), pct(lat, 100).Milliseconds()
	res.ImportAllMS = millis(lat)
	return users, nil
}

// timeSims times uncached then cached Sim.Run calls on 10 of user's
// trades, then deletes the run's Redis keys.
func timeSims(ctx context.Context, env pipelines.Env, f sluiceFlags, user string, calls int, res *sloResult) error {
	lim, err := ratelimit.New(ctx, env.Redis, ratelimit.Config{Source: trades.SourceMarketData, KeyPrefix: f.prefix}, env.Registerer)
	if err != nil {
		return fmt.Errorf("rate limiter: %w", err)
	}
	sim, err := trades.NewSim(trades.SimConfig{
		Trades: trades.PGTrades{DB: env.DB}, Stored: trades.PGMarketBars{DB: env.DB},
		Vendor: trades.LimitedVendor{Limiter: lim, Vendor: trades.SyntheticMarketData{}},
		Cache:  env.Redis, Registerer: env.Registerer,
	})
	if err != nil {
		return err
	}
	defer func() {
		for _, pattern := range []string{"sim:" + user + ":*", f.prefix + "*"} {
			iter := env.Redis.Scan(context.Background(), 0, pattern, 1000).Iterator()
			for iter.Next(context.Background()) {
				env.Redis.Del(context.Background(), iter.Val())
			}
		}
	}()
	rows, err := env.DB.Query(ctx, `SELECT id::text FROM trades WHERE user_id = $1 ORDER BY ts LIMIT 10`, user)
	if err != nil {
		return fmt.Errorf("trades of %s: %w", user, err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("no trades of %s", user)
	}
	const horizonDays = 7
	var miss, hit []time.Duration
	for _, id := range ids {
		t0 := time.Now()
		if _, err := sim.Run(ctx, user, id, horizonDays); err != nil {
			return fmt.Errorf("sim %s: %w", id, err)
		}
		miss = append(miss, time.Since(t0))
	}
	hits := 0
	for i := range calls {
		t0 := time.Now()
		r, err := sim.Run(ctx, user, ids[i%len(ids)], horizonDays)
		if err != nil {
			return fmt.Errorf("sim %s: %w", ids[i%len(ids)], err)
		}
		hit = append(hit, time.Since(t0))
		if r.Cached {
			hits++
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	res.SimTradesPerRun, res.SimMisses, res.SimMissP95MS = len(ids), len(miss), ms(pct(miss, 95))
	res.SimCalls, res.SimCachedHits = calls, hits
	res.SimCachedP50MS, res.SimCachedP95MS, res.SimCachedMaxMS = ms(pct(hit, 50)), ms(pct(hit, 95)), ms(pct(hit, 100))
	return nil
}
