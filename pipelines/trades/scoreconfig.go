package trades

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/stages/run"
)

// ScoreName is the trades-score service: its consumer group, its runtime
// name and the dlq.stage of its dead letters.
const ScoreName = "trades-score"

// DigestName is the trades-digest service: its consumer group, its runtime
// name and the dlq.stage of its dead letters.
const DigestName = "trades-digest"

// Defaults of the score and digest services.
const (
	// DefaultScoreAttempts, DefaultScoreBackoff and DefaultScoreMaxBackoff:
	// an AI coach or market-data failure is tried 3 times in all, 1 s
	// doubling to 10 s, then dead-lettered (retries_exhausted, rule
	// trades.ai or trades.marketdata).
	DefaultScoreAttempts   = 3
	DefaultScoreBackoff    = time.Second
	DefaultScoreMaxBackoff = 10 * time.Second
	// DefaultDigestGrace, DefaultDigestSettle and DefaultDigestHorizon are
	// TRADES_DIGEST_GRACE, TRADES_DIGEST_SETTLE and TRADES_DIGEST_HORIZON.
	DefaultDigestGrace   = time.Hour
	DefaultDigestSettle  = 30 * time.Second
	DefaultDigestHorizon = 8 * 7 * 24 * time.Hour
	// DefaultDigestTick is the period of a partition's emission timer.
	DefaultDigestTick = 10 * time.Second
	// DefaultDigestStateFlush is how long the digest store's writes made
	// without an emission may wait for their changelog records (Kafka
	// Streams' default commit interval).
	DefaultDigestStateFlush = 30 * time.Second
)

// ScoreConfig configures trades-score. Zero fields take the defaults
// documented on each field.
type ScoreConfig struct {
	// Runtime holds optional runtime knobs. Name, Group, Topics and
	// DLQTopic are set from the declaration; Retry defaults to 3 attempts,
	// 1 s → 10 s; BatchMaxRecords defaults to 1, so that a request is
	// scored against the bias_tags its predecessor wrote.
	Runtime run.Config
	// BiasTopic receives trade.scored, ReflectTopic coach.reflect (set from
	// the declaration).
	BiasTopic, ReflectTopic string
	// Coach configures the AI coach (AI_BASE_URL, AI_HMAC_KEY_ID,
	// AI_HMAC_SECRET, AI_TIMEOUT_MS). An empty BaseURL writes insights
	// from templates and calls nothing.
	Coach CoachConfig
	// Tone is the tone of insights (default ToneSupportive).
	Tone string
	// AIConcurrency bounds the coach calls of one request in flight
	// (default 4).
	AIConcurrency int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// DigestConfig configures trades-digest. Zero fields take the defaults
// documented on each field.
type DigestConfig struct {
	// Runtime holds optional runtime knobs. Name, Group, Topics and
	// DLQTopic are set from the declaration.
	Runtime run.Config
	// StateTopic is the window store's changelog, ReadyTopic receives
	// digest.ready (set from the declaration).
	StateTopic, ReadyTopic string
	// Grace (default 1 h), Settle (default 30 s) and Horizon (default 8
	// weeks): a window is emitted once now ≥ its end + Grace and its last
	// change is Settle old; it is forgotten Horizon after its end.
	Grace, Settle, Horizon time.Duration
	// Tick is the period of each partition's emission timer (default 10 s).
	Tick time.Duration
	// StateFlush bounds how long store writes made without an emission
	// (contributions, pending revisions) wait before their changelog
	// records, one per key, are written with their offsets (default 30 s;
	// see run.WithStateFlushEvery). An emission flushes at once.
	StateFlush time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c ScoreConfig) withDefaults() ScoreConfig {
	if c.Runtime.Retry.MaxAttempts == 0 {
		c.Runtime.Retry = run.RetryPolicy{MaxAttempts: DefaultScoreAttempts, Initial: DefaultScoreBackoff, Max: DefaultScoreMaxBackoff}
	}
	if c.Runtime.BatchMaxRecords == 0 {
		c.Runtime.BatchMaxRecords = 1
	}
	if c.Tone == "" {
		c.Tone = ToneSupportive
	}
	if c.AIConcurrency <= 0 {
		c.AIConcurrency = 4
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c DigestConfig) withDefaults() DigestConfig {
	if c.Grace == 0 {
		c.Grace = DefaultDigestGrace
	}
	if c.Settle == 0 {
		c.Settle = DefaultDigestSettle
	}
	if c.Horizon == 0 {
		c.Horizon = DefaultDigestHorizon
	}
	if c.Tick == 0 {
		c.Tick = DefaultDigestTick
	}
	if c.StateFlush == 0 {
		c.StateFlush = DefaultDigestStateFlush
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// scoreDigestEnv fills the settings of c left zero from the environment
// through getenv: AI_BASE_URL, AI_HMAC_KEY_ID, AI_HMAC_SECRET,
// AI_TIMEOUT_MS (milliseconds) and TRADES_DIGEST_GRACE,
// TRADES_DIGEST_SETTLE, TRADES_DIGEST_HORIZON (Go durations, "1h", "30s",
// "1344h"). An invalid value is an error naming the variable (never the
// secret's value).
func scoreDigestEnv(s ScoreConfig, d DigestConfig, getenv func(string) string) (ScoreConfig, DigestConfig, error) {
	if getenv == nil {
		return s, d, nil
	}
	if s.Coach.BaseURL == "" {
		s.Coach.BaseURL = getenv("AI_BASE_URL")
	}
	if s.Coach.KeyID == "" {
		s.Coach.KeyID = getenv("AI_HMAC_KEY_ID")
	}
	if s.Coach.Secret == "" {
		s.Coach.Secret = getenv("AI_HMAC_SECRET")
	}
	if v := getenv("AI_TIMEOUT_MS"); v != "" && s.Coach.Timeout == 0 {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return s, d, fmt.Errorf("invalid AI_TIMEOUT_MS=%q: want a positive number of milliseconds", v)
		}
		s.Coach.Timeout = time.Duration(ms) * time.Millisecond
	}
	for _, e := range []struct {
		name string
		dst  *time.Duration
	}{{"TRADES_DIGEST_GRACE", &d.Grace}, {"TRADES_DIGEST_SETTLE", &d.Settle}, {"TRADES_DIGEST_HORIZON", &d.Horizon}} {
		v := getenv(e.name)
		if v == "" || *e.dst != 0 {
			continue
		}
		dur, err := time.ParseDuration(v)
		if err != nil || dur <= 0 {
			return s, d, fmt.Errorf("invalid %s=%q: want a positive duration such as 1h or 30s", e.name, v)
		}
		*e.dst = dur
	}
	return s, d, nil
}
