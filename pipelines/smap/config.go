package smap

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/stages/progress"
	"github.com/sluicehq/sluice/stages/run"
)

// Defaults of Config.
const (
	// DefaultRedisDB is the logical Redis database reserved for smap state
	// (the seed keeps DB 0 for caches so that eviction never drops a
	// progress counter).
	DefaultRedisDB = 1
	// DefaultKeyPrefix makes the progress hash of project ID "smap:proj:ID".
	DefaultKeyPrefix = "smap:proj:"
)

// Config configures the smap pipelines. The zero value is usable: every
// field has the default documented on it.
type Config struct {
	// Topics and consumer groups. Empty ones default to the declared
	// names (Declare); tests set them for isolation.
	ProjectCreatedTopic   string
	DataCollectedTopic    string
	AnalysisFinishedTopic string
	JobCompletedTopic     string
	// AnalyticsErrorsTopic is the smap DLQ: failed items from analytics,
	// and the runtime dead letters of the collector and the progress
	// counter (told apart by the dlq.stage header).
	AnalyticsErrorsTopic string

	CollectorGroup, AnalyticsGroup, ProgressGroup string

	// RedisDB is the logical database of the progress state (0 means
	// DefaultRedisDB; DB 0 is reserved for caches and cannot be chosen).
	// When env.Redis is on another database, a client with the same
	// options on RedisDB is derived and closed when the services stop.
	RedisDB int
	// KeyPrefix prefixes progress keys (default "smap:proj:").
	KeyPrefix string
	// StateTTL is the lifetime of a project's progress state (default 7 days).
	StateTTL time.Duration

	// Crawler finds items (default: SchemeCrawler with a SyntheticCrawler of
	// 20 items per target and an HTTPCrawler with its defaults).
	Crawler Crawler
	// CrawlRetry bounds the crawls of a target whose crawl fails
	// transiently (the crawler returned an error classified with
	// stages.Retry or stages.RetryAfter; see Crawler): it is crawled again
	// at the next attempt of the project.created record while the attempt
	// is below MaxAttempts (default 4) and not the runtime's last, the
	// wait the collector asks the runtime for being exponential with
	// jitter (default 1s doubling up to Max, 30s) and at least the
	// error's RetryAfter, capped at Max. The runtime waits with the
	// partition paused and ends the wait at once when the partition is
	// revoked or the service stops: the project.created record is then
	// neither committed nor dead-lettered, and its next owner crawls the
	// project again. A target still failing at the last such attempt is
	// skipped like one failing permanently.
	CrawlRetry run.RetryPolicy
	// Analyzers run on every item in order (default Builtins()).
	Analyzers []Analyzer
	// MissingStateWait is how long the progress counter waits before
	// retrying an item whose project has no state in Redis (default 2s);
	// Runtime.Retry.MaxAttempts bounds the retries, then the record is
	// dead-lettered and `rebuild-progress` recovers the count from
	// post_analytics.
	MissingStateWait time.Duration

	// Runtime holds the runtime settings shared by the three runners
	// (batching, retries, commit interval, revoke timeout). Name, Group,
	// Topics and DLQTopic are set per service. The collector and the
	// progress counter use at least 30 attempts so that a short Redis or
	// object-store outage loses nothing and strands no project. Analytics
	// reads a raw object that fails transiently again at each attempt of
	// Retry; at the last the item fails as retries_exhausted (rule
	// smap.raw_object_read).
	Runtime run.Config

	// Now is the clock of event timestamps (default time.Now).
	Now func() time.Time

	// Test hooks (nil in production).
	afterDecision func(ctx context.Context, c progress.Completion) error // counter: after a completion decision, before the publish
	beforePublish func(ctx context.Context, cs []progress.Completion) error
	afterSnapshot func(ctx context.Context) // RebuildProgress: after reading the systems of record, before replacing the state
}

func (c Config) withDefaults() Config {
	c = c.named(Declare(Config{}), true)
	c.KeyPrefix = cmp.Or(c.KeyPrefix, DefaultKeyPrefix)
	if c.RedisDB == 0 {
		c.RedisDB = DefaultRedisDB
	}
	if c.StateTTL <= 0 {
		c.StateTTL = progress.DefaultTTL
	}
	if c.Crawler == nil {
		c.Crawler = SchemeCrawler{Synthetic: &SyntheticCrawler{}, HTTP: &HTTPCrawler{}}
	}
	if c.CrawlRetry.MaxAttempts <= 0 {
		c.CrawlRetry.MaxAttempts = 4
	}
	if c.CrawlRetry.Initial <= 0 {
		c.CrawlRetry.Initial = time.Second
	}
	if c.CrawlRetry.Max <= 0 {
		c.CrawlRetry.Max = 30 * time.Second
	}
	if c.CrawlRetry.Jitter <= 0 {
		c.CrawlRetry.Jitter = 0.2
	}
	if c.Analyzers == nil {
		c.Analyzers = Builtins()
	}
	if c.MissingStateWait <= 0 {
		c.MissingStateWait = 2 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	if c.RedisDB < 0 {
		return errors.New("smap: RedisDB must be ≥ 0")
	}
	return nil
}

// runConfig returns the runtime config of one service.
func (c Config) runConfig(name, group, topic string) run.Config {
	rc := c.Runtime
	rc.Name, rc.Group, rc.Topics, rc.DLQTopic = name, group, []string{topic}, c.AnalyticsErrorsTopic
	return rc
}
