package modules

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/stages/ratelimit"
	"github.com/sluicehq/sluice/stages/run"
)

// Config configures the modules pipeline (services modules-refresh and
// modules-mirror). Zero fields take the defaults documented on each field.
type Config struct {
	// RefreshTopic, StateTopic and DLQTopic: the refresh and state topics
	// must have the same partition count. RefreshGroup and MirrorGroup are
	// the two consumer groups. Empty names default to the declared ones
	// (Declare); tests set them for isolation.
	RefreshTopic, StateTopic, DLQTopic string
	RefreshGroup, MirrorGroup          string

	// Source is the upstream (default: NewSynthetic with SyntheticLatency
	// and SyntheticFaults).
	Source ModuleSource
	// SourceName names the source in rate-limit keys (default "uw").
	SourceName string
	// RateLimit configures the Redis limiter in front of the source.
	RateLimit RateLimitConfig
	// UpstreamTimeout bounds one upstream call (default UpstreamTimeout).
	UpstreamTimeout time.Duration
	// Retry is the refresh's retry policy for transient upstream and
	// Postgres failures (the runtime's: Runtime.Retry is replaced by it):
	// default UpstreamAttempts attempts, UpstreamBackoff doubling to
	// UpstreamBackoffMax. 429 answers wait without spending an attempt.
	Retry run.RetryPolicy
	// ErrorCooldown: after a failed refresh, requests are skipped for this
	// long (MODULES_ERROR_COOLDOWN, default DefaultErrorCooldown).
	ErrorCooldown time.Duration
	// Catalog reads the module catalog (default LoadCatalog on the
	// pipeline's database); it is read again every CatalogRefresh
	// (default 60 s). A failed re-read keeps the catalog read before.
	Catalog        func(ctx context.Context) (Catalog, error)
	CatalogRefresh time.Duration
	// Analyzers are the modules' analyzers (default DefaultAnalyzers()).
	// A module without one is refused as modules.upstream_rejected.
	Analyzers map[string]Analyzer
	// MemberID names this member in the refresh leases (default: the host
	// name and a random suffix, unique per service).
	MemberID string
	// Routes, when set, are extra HTTP routes (pattern → handler) mounted
	// on the ops server (pipelines.Env.Ops) with the services, besides the
	// modules API (assemble, refresh, status, jobs) mounted there too.
	Routes map[string]http.Handler
	// AssembleBudget bounds an assemble answer (MODULES_ASSEMBLE_BUDGET,
	// default DefaultAssembleBudget).
	AssembleBudget time.Duration
	// Getenv, when set, is read by the services for the MODULES_* and UW_*
	// settings (see ApplyEnv) before any default applies; nil reads none.
	Getenv func(string) string
	// Runtime holds optional runtime knobs of both runners (batching,
	// commit interval, revoke timeout). Name, Group, Topics, DLQTopic and
	// Retry are set by the pipeline; the mirror's Window defaults to
	// MirrorWindow; KeyConcurrency applies to the refresh only (default
	// RefreshKeyConcurrency), whose BatchMaxRecords and BatchLinger default
	// to RefreshBatchMaxRecords and RefreshBatchLinger.
	Runtime run.Config
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
	// wrapDB, when set, wraps the refresh's database (tests inject
	// failures with it).
	wrapDB func(DB) DB
}

// RateLimitConfig configures the limiter of upstream calls.
type RateLimitConfig struct {
	// Disabled turns the limiter off (no Redis needed).
	Disabled bool
	// Windows default to DefaultRateLimit (MODULES_RATE_LIMIT).
	Windows []ratelimit.Window
	// Backoff shapes the waits after denials.
	Backoff ratelimit.Backoff
	// KeyPrefix is prepended to the limiter's keys (default none).
	KeyPrefix string
}

// DefaultRateLimit is MODULES_RATE_LIMIT's default: 120 calls a minute,
// 5 a second, over all members.
const DefaultRateLimit = "1m:120,1s:5"

// RefreshKeyConcurrency is how many requests of different keys one
// partition's refresh handles at once (run.Config.KeyConcurrency): a
// request mostly waits for the upstream (and the limiter), so partitions
// alone would bound the calls in flight to one per partition. Requests of
// one key still run one after the other, so N queued requests of a key
// cost one call.
const RefreshKeyConcurrency = 32

// The refresh's batches (run.Config.BatchMaxRecords and BatchLinger,
// unless Runtime sets them). A batch grows while its requests wait for the
// upstream, up to RefreshBatchMaxRecords, and its offsets commit when its
// last request is done: a key whose first request lies beyond that bound
// waits for the batch's slowest key, so the bound is large (requests are
// a few hundred bytes; the memory budget bounds them too). No linger: the
// batch grows anyway.
const (
	RefreshBatchMaxRecords = 5000
	RefreshBatchLinger     = time.Millisecond
)

// DefaultCatalogRefresh is how often the refresh service re-reads the
// catalog.
const DefaultCatalogRefresh = time.Minute

// MirrorBatchLinger is the mirror's default run.Config.BatchLinger: a
// state turns into a row about twice this long after it was read, when no
// more follow (the batch's and the window's waits; the runtime's default
// 50 ms would make every refresh look that much slower to readers of the
// view). Coalescing does not depend on it: states arriving while a window
// is written, and a backlog, still share a window.
const MirrorBatchLinger = time.Millisecond

// MirrorWindow returns the mirror's default coalescing window: under a
// backlog (a restart reading modules.state from the start) the states of a
// key are merged, keeping the greatest token, and written once per window
// of at most 10 000 keys or 2 s.
func MirrorWindow() run.WindowConfig {
	return run.WindowConfig{MaxKeys: 10_000, MaxAge: 2 * time.Second, MaxTotalKeys: 50_000}
}

// ParseRateLimit parses MODULES_RATE_LIMIT: comma-separated SIZE:LIMIT
// windows, SIZE a Go duration ("1m", "1s"), LIMIT a positive count.
func ParseRateLimit(s string) ([]ratelimit.Window, error) {
	var ws []ratelimit.Window
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		size, limit, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("rate limit window %q is not SIZE:LIMIT", part)
		}
		d, err := time.ParseDuration(strings.TrimSpace(size))
		if err != nil || d < time.Millisecond {
			return nil, fmt.Errorf("rate limit window %q: size is not a duration of at least 1ms", part)
		}
		n, err := strconv.Atoi(strings.TrimSpace(limit))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("rate limit window %q: limit is not a positive count", part)
		}
		ws = append(ws, ratelimit.Window{Size: d, Limit: n})
	}
	if len(ws) == 0 {
		return nil, errors.New("rate limit: no window")
	}
	return ws, nil
}

// ApplyEnv sets c's unset fields from the environment read with getenv:
// MODULES_SOURCE (synthetic, the default, or uw), UW_BASE_URL and
// UW_API_KEY (a secret, required by uw and never logged),
// MODULES_RATE_LIMIT (see ParseRateLimit), MODULES_ASSEMBLE_BUDGET,
// MODULES_ERROR_COOLDOWN,
// MODULES_SYNTHETIC_LATENCY (Go durations) and MODULES_SYNTHETIC_FAULTS
// (see ParseFaults). Errors name the variable, never the key's value.
func (c Config) ApplyEnv(getenv func(string) string) (Config, error) {
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	dur := func(k string) (time.Duration, error) {
		v := get(k)
		if v == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("modules: %s=%q is not a non-negative duration", k, v)
		}
		return d, nil
	}
	if v := get("MODULES_RATE_LIMIT"); v != "" && len(c.RateLimit.Windows) == 0 {
		ws, err := ParseRateLimit(v)
		if err != nil {
			return c, fmt.Errorf("modules: MODULES_RATE_LIMIT: %w", err)
		}
		c.RateLimit.Windows = ws
	}
	if c.AssembleBudget == 0 && get("MODULES_ASSEMBLE_BUDGET") != "" {
		d, err := ParseAssembleBudget(getenv)
		if err != nil {
			return c, err
		}
		c.AssembleBudget = d
	}
	if c.ErrorCooldown == 0 {
		d, err := dur("MODULES_ERROR_COOLDOWN")
		if err != nil {
			return c, err
		}
		c.ErrorCooldown = d
	}
	if c.Source != nil {
		return c, nil
	}
	switch src := get("MODULES_SOURCE"); src {
	case "", "synthetic":
		latency, err := dur("MODULES_SYNTHETIC_LATENCY")
		if err != nil {
			return c, err
		}
		faults, err := ParseFaults(get("MODULES_SYNTHETIC_FAULTS"))
		if err != nil {
			return c, fmt.Errorf("modules: MODULES_SYNTHETIC_FAULTS: %w", err)
		}
		c.Source = NewSynthetic(SyntheticConfig{Latency: latency, Faults: faults})
	case "uw":
		key := get("UW_API_KEY")
		if key == "" {
			return c, errors.New("modules: MODULES_SOURCE=uw needs UW_API_KEY")
		}
		uw, err := NewUW(UWConfig{BaseURL: get("UW_BASE_URL"), APIKey: key})
		if err != nil {
			return c, fmt.Errorf("modules: UW source: %w", err)
		}
		c.Source = uw
	default:
		return c, fmt.Errorf("modules: MODULES_SOURCE=%q is neither synthetic nor uw", src)
	}
	return c, nil
}

func (c Config) withDefaults() (Config, error) {
	c = c.named(Declare(Config{}), true)
	if c.Getenv != nil {
		var err error
		if c, err = c.ApplyEnv(c.Getenv); err != nil {
			return c, err
		}
		c.Getenv = nil
	}
	if c.Source == nil {
		c.Source = NewSynthetic(SyntheticConfig{})
	}
	if c.SourceName == "" {
		c.SourceName = "uw"
	}
	if len(c.RateLimit.Windows) == 0 {
		ws, err := ParseRateLimit(DefaultRateLimit)
		if err != nil {
			return c, err
		}
		c.RateLimit.Windows = ws
	}
	if c.UpstreamTimeout <= 0 {
		c.UpstreamTimeout = UpstreamTimeout
	}
	if c.Retry.MaxAttempts <= 0 {
		c.Retry.MaxAttempts = UpstreamAttempts
	}
	if c.Retry.Initial <= 0 {
		c.Retry.Initial = UpstreamBackoff
	}
	if c.Retry.Max <= 0 {
		c.Retry.Max = UpstreamBackoffMax
	}
	if c.ErrorCooldown <= 0 {
		c.ErrorCooldown = DefaultErrorCooldown
	}
	if c.CatalogRefresh <= 0 {
		c.CatalogRefresh = DefaultCatalogRefresh
	}
	if c.Analyzers == nil {
		c.Analyzers = DefaultAnalyzers()
	}
	if c.MemberID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.MemberID = strings.Trim(host+"-"+hex.EncodeToString(b[:]), "-")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}
