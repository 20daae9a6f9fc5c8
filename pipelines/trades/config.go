package trades

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/stages/run"
)

// Config configures the trades pipeline, one section per service. Zero
// fields take the defaults documented on each field.
type Config struct {
	Import ImportConfig
	Score  ScoreConfig
	Digest DigestConfig
	// Getenv, when set, fills the Score and Digest settings left zero from
	// the environment through it (AI_*, TRADES_DIGEST_*; see
	// scoreDigestEnv).
	Getenv func(string) string
}

// ImportConfig configures the trades-import service.
type ImportConfig struct {
	// Group, ImportTopic, StateTopic, EventsTopic and DLQTopic default to
	// the declared names (Declare); tests set them for isolation. The
	// import and state topics must have the same partition count.
	Group                                          string
	ImportTopic, StateTopic, EventsTopic, DLQTopic string
	// DedupeWindow is how long after an import COMPLETED the same import
	// (same user, since and broker) without force is dropped as deduped
	// (TRADES_IMPORT_DEDUPE_WINDOW, default 1h).
	DedupeWindow time.Duration
	// TokenKey opens the sealed tokens of broker_connections
	// (BROKER_TOKEN_KEY). Nil: coinbase and binance imports cannot run (a
	// fatal error stops the runner when one arrives, so the command is kept
	// until the key is configured).
	TokenKey *TokenSealer
	// RateLimitSafety is added to every rate-limit wait
	// (BROKER_RATE_LIMIT_SAFETY_MS, default 250ms).
	RateLimitSafety time.Duration
	// MaxPageWait bounds the time one page may wait on HTTP 429 answers
	// (default 30m); past it the run fails as retries_exhausted with rule
	// trades.broker_fetch.
	MaxPageWait time.Duration
	// FetchTimeout bounds one broker call (default 30s).
	FetchTimeout time.Duration
	// Adapters replace the broker adapters by broker name (tests). Missing
	// ones default to NewSynthetic, NewCoinbase(CoinbaseURL) and
	// NewBinance(BinanceURL, BinanceSymbols).
	Adapters map[string]BrokerAdapter
	// CoinbaseURL and BinanceURL are the API base URLs (defaults: the
	// public APIs); BinanceSymbols are the symbols a binance import reads
	// (default BTCUSDT, ETHUSDT).
	CoinbaseURL, BinanceURL string
	BinanceSymbols          []string
	// Retry is the retry policy of a page's broker fetch (the runtime's:
	// Runtime.Retry is replaced by it): network errors and 5xx answers are
	// retried up to MaxAttempts attempts in all (default 6), backoff 1s
	// doubling to 60s with jitter; then the run fails as retries_exhausted
	// (trades.broker_fetch).
	Retry run.RetryPolicy
	// DBRetryWait is the wait before a page whose Postgres transaction
	// failed transiently is run again (default 2s; a wait, not an attempt).
	DBRetryWait time.Duration
	// Runtime holds optional runtime knobs (batching, commit interval);
	// Name, Group, Topics, DLQTopic and Retry are set by the pipeline.
	Runtime run.Config
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

// Defaults of ImportConfig.
const (
	DefaultDedupeWindow    = time.Hour
	DefaultRateLimitSafety = 250 * time.Millisecond
	DefaultMaxPageWait     = 30 * time.Minute
)

func (c ImportConfig) withDefaults() ImportConfig {
	c = c.named(catalogName, true)
	if c.DedupeWindow <= 0 {
		c.DedupeWindow = DefaultDedupeWindow
	}
	if c.RateLimitSafety <= 0 {
		c.RateLimitSafety = DefaultRateLimitSafety
	}
	if c.MaxPageWait <= 0 {
		c.MaxPageWait = DefaultMaxPageWait
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = 30 * time.Second
	}
	if c.Retry.MaxAttempts <= 0 {
		c.Retry.MaxAttempts = 6
	}
	if c.Retry.Initial <= 0 {
		c.Retry.Initial = time.Second
	}
	if c.Retry.Max <= 0 {
		c.Retry.Max = time.Minute
	}
	if c.DBRetryWait <= 0 {
		c.DBRetryWait = 2 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	rt := c.Runtime
	rt.Name = ImportName
	rt.Group = c.Group
	rt.Topics = []string{c.ImportTopic}
	rt.DLQTopic = c.DLQTopic
	if rt.BatchMaxRecords <= 0 {
		rt.BatchMaxRecords = 20 // a page is a broker call: small batches keep commits close
	}
	rt.Retry = c.Retry
	c.Runtime = rt
	return c
}

func (c ImportConfig) validate() error {
	ts := []string{c.ImportTopic, c.StateTopic, c.EventsTopic, c.DLQTopic}
	for i := range ts {
		for j := i + 1; j < len(ts); j++ {
			if ts[i] == ts[j] {
				return errors.New("trades-import: the import, state, events and DLQ topics must differ")
			}
		}
	}
	return nil
}

// catalogName is the names function of a run without Naming: every group
// and topic keeps its declared name.
func catalogName(n string) string { return n }
