package silver

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages/run"
)

// Config configures the silver pipeline. Zero fields take the defaults
// documented on each field.
type Config struct {
	// Group is the consumer group; every process in it shares the
	// partitions of Topic.
	Group string
	// Topic is the bronze input; DLQTopic receives failed records;
	// FlagsTopic receives SCRAPE_SLOW. Empty names and Group default to
	// the declared ones (Declare); tests set them for isolation.
	Topic, DLQTopic, FlagsTopic string
	// BacklogThreshold: a lag above it sets SCRAPE_SLOW (default 10 000).
	BacklogThreshold int64
	// BacklogInterval is how often the lag is checked (default 5 s).
	BacklogInterval time.Duration
	// MarketLocation is the market time zone of rule ta.trade_date
	// (default Asia/Ho_Chi_Minh).
	MarketLocation *time.Location
	// Runtime overrides batching, retry and commit settings; its Name,
	// Group, Topics and DLQTopic are set from the fields above. Zero batch
	// settings take the silver defaults (DefaultBatchMaxRecords,
	// DefaultBatchMaxBytes, DefaultMaxInFlight), a zero Window the silver
	// coalescing window (DefaultWindowMaxKeys, DefaultWindowMaxAge,
	// DefaultWindowMaxTotalKeys; a negative Window.MaxKeys turns windows
	// off, a negative Window.MaxTotalKeys lifts the bound over all
	// partitions), the others the runtime's.
	Runtime run.Config
	// Clock is the validator's clock (default time.Now).
	Clock func() time.Time
}

// Silver's batch defaults. A batch is the unit of processing (decode, the
// rules, the dead letters of the stage) and, once the partition has caught
// up, of writing; under a backlog the coalescing window below decides what
// is written. Large batches cut the per-transaction cost of a caught-up
// stream that still runs hot (measured before windows existed, 1 M records:
// 2 000-record batches 19–21 s, 10 000 14–15 s). A batch only fills up to
// the limit when records are waiting: otherwise BatchLinger bounds the
// wait, so the latency of a quiet stream does not change. MaxInFlight, the
// records buffered per partition, is kept just above one batch to bound
// memory (it must stay above one fetch, about 2 000 bronze records per MiB).
const (
	DefaultBatchMaxRecords = 10_000
	DefaultBatchMaxBytes   = 8 << 20
	DefaultMaxInFlight     = 12_000
)

// Silver's coalescing window (run.WindowConfig): under a backlog a
// partition worker merges the rows of consecutive batches per key and
// upserts each key once per window instead of once per batch (bronze
// re-scrapes the same bars and articles, so keys repeat across batches).
// The window closes at DefaultWindowMaxKeys keys, after
// DefaultWindowMaxAge, or as soon as the partition has caught up, so a
// quiet stream is written batch by batch as before. The windows of all the
// partitions a process holds are closed once they hold
// DefaultWindowMaxTotalKeys keys together, so memory does not grow with the
// number of partitions a process takes over. The bound is set above
// bench-silver's backlog (311 000 keys) on purpose: closing the same
// backlog at 250 000 keys turned 180 000 of its later rows into updates of
// rows just written (PostgreSQL CPU 3 → 6–8 s, the run 6.3 → 9.2–9.9 s).
// Memory is bounded by the process's memory budget (run.Budget,
// `sluice run --memory-budget`) whatever these bounds: the windows hold
// rows encoded (the sink is a run.Encoder, about 450 bytes per key with
// the map and offsets on bench-silver's corpus) and close early when the
// budget is full.
const (
	DefaultWindowMaxKeys      = 100_000
	DefaultWindowMaxAge       = 10 * time.Second
	DefaultWindowMaxTotalKeys = 400_000
)

func (c Config) withDefaults() (Config, error) {
	c = c.named(Declare(Config{}), true)
	if c.BacklogThreshold <= 0 {
		c.BacklogThreshold = 10_000
	}
	if c.BacklogInterval <= 0 {
		c.BacklogInterval = 5 * time.Second
	}
	if c.MarketLocation == nil {
		loc, err := time.LoadLocation("Asia/Ho_Chi_Minh")
		if err != nil {
			return c, fmt.Errorf("silver: market time zone: %w", err)
		}
		c.MarketLocation = loc
	}
	if c.Runtime.BatchMaxRecords == 0 {
		c.Runtime.BatchMaxRecords = DefaultBatchMaxRecords
	}
	if c.Runtime.BatchMaxBytes == 0 {
		c.Runtime.BatchMaxBytes = DefaultBatchMaxBytes
	}
	if c.Runtime.MaxInFlight == 0 {
		c.Runtime.MaxInFlight = max(DefaultMaxInFlight, c.Runtime.BatchMaxRecords+c.Runtime.BatchMaxRecords/5)
	}
	switch {
	case c.Runtime.Window.MaxKeys < 0:
		c.Runtime.Window = run.WindowConfig{}
	case c.Runtime.Window.MaxKeys == 0:
		c.Runtime.Window.MaxKeys = DefaultWindowMaxKeys
	}
	if c.Runtime.Window.MaxKeys > 0 && c.Runtime.Window.MaxAge == 0 {
		c.Runtime.Window.MaxAge = DefaultWindowMaxAge
	}
	switch {
	case c.Runtime.Window.MaxKeys == 0 || c.Runtime.Window.MaxTotalKeys < 0:
		c.Runtime.Window.MaxTotalKeys = 0
	case c.Runtime.Window.MaxTotalKeys == 0:
		c.Runtime.Window.MaxTotalKeys = DefaultWindowMaxTotalKeys
	}
	c.Runtime.Name, c.Runtime.Group = "silver", c.Group
	c.Runtime.Topics, c.Runtime.DLQTopic = []string{c.Topic}, c.DLQTopic
	return c, nil
}

// Services declares the silver pipeline: bronze.records → Decode → Stage
// (the 14 rules, first failure wins → bronze.dlq) → ta_silver / sa_silver
// upsert; plus the backlog monitor that maintains SCRAPE_SLOW. It needs
// env.Kafka and env.DB.
func Services(env pipelines.Env, cfg Config) ([]pipelines.Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if env.DB == nil {
		return nil, errors.New("silver needs PostgreSQL: set DATABASE_URL")
	}
	vopts := []Option{WithMarketLocation(cfg.MarketLocation)}
	if cfg.Clock != nil {
		vopts = append(vopts, WithClock(cfg.Clock))
	}
	sink, err := NewSink(env.DB, pgsink.WithRegisterer(env.Registerer, "silver"), pgsink.WithLogger(env.Logger))
	if err != nil {
		return nil, err
	}
	runner, err := run.New(cfg.Runtime, Decode, Stage(vopts...), sink,
		run.WithKafkaOpts(env.GroupKafka(cfg.Runtime.Group)...), run.WithRegisterer(env.Registerer), run.WithLogger(env.Logger),
		run.WithStageName(StageName), run.WithBudget(env.Memory))
	if err != nil {
		return nil, fmt.Errorf("silver: %w", err)
	}
	monitor, err := NewBacklogMonitor(env, BacklogConfig{
		Group: cfg.Group, Topic: cfg.Topic, FlagsTopic: cfg.FlagsTopic,
		Threshold: cfg.BacklogThreshold, Interval: cfg.BacklogInterval,
	})
	if err != nil {
		return nil, err
	}
	return []pipelines.Service{runner, monitor}, nil
}
