// Package ratelimit is a distributed multi-window sliding-window rate
// limiter on Redis, and a stage wrapper that pauses a partition while its
// key is over the limit.
//
// # Algorithm
//
// Every (source, account) pair has one Redis sorted set per window, keyed
// "rate_limit:SOURCE:KIND:{ACCOUNT}:WINDOW" (KIND defaults to "historical",
// WINDOW is the window's name such as "10m", "1m", "1s"), and a guard hash
// "rate_limit:SOURCE:KIND:{ACCOUNT}:guard". The braces are a Redis Cluster
// hash tag: every key of a pair hashes to one slot, as one script needs.
// One Lua script checks all windows of a pair atomically:
//
//  1. it reads the Redis server's clock (TIME, microseconds), so every
//     client shares one clock whatever its own drift;
//  2. for every window it removes the members older than the window and
//     counts the rest;
//  3. if any window is full, it adds nothing and returns the time until the
//     oldest member that keeps the binding window full leaves it (the
//     largest such wait over all full windows);
//  4. otherwise it adds one member to every window, scored by the server
//     time and unique per request (server time plus a random request id),
//     and sets each key's TTL to its window plus a buffer.
//
// The script is loaded once with SCRIPT LOAD and called with EVALSHA; when
// the server lost its script cache (restart, SCRIPT FLUSH, failover) the
// call falls back to EVAL, which reloads it (go-redis Script.Run).
//
// # Lost state
//
// A Redis restarted without persistence (or a crash that loses the
// append-only file's last second, a failover to a lagging replica, an
// evicted key) forgets grants that still count, and a limiter that trusted
// the empty windows would grant up to twice a window's limit. The guard
// detects it: it holds an id and the server time of the pair's last grant,
// and each Limiter remembers, per account, the guard id it last saw and the
// time of its own last grant. When that grant is younger than the longest
// window but the guard is missing, has another id or an older last grant,
// the script starts a hold: every call of the pair is denied until the
// longest window has passed, after which nothing granted before the loss
// can count (sluice_ratelimit_state_lost_total counts these). A process
// that never granted before the loss cannot detect it; run Redis with its
// append-only file (appendfsync everysec) so that a restart loses nothing
// but, at worst, the last second, which the guard then detects.
//
// # Thread safety
//
// A Limiter and the stages built on it are safe for concurrent use.
package ratelimit

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/promreg"
)

//go:embed multiwindow.lua
var scriptSrc string

// Window is one sliding window: at most Limit grants in any interval of
// length Size.
type Window struct {
	// Name is the key suffix (default: the size, e.g. "10m", "1s", "500ms").
	Name string
	// Size is the window length (at least 1ms).
	Size time.Duration
	// Limit is the number of grants allowed within any Size interval (≥ 1).
	Limit int
}

// DefaultWindows are the windows of seed 002: 10 minutes, 1 minute and
// 1 second. The 10-minute limit is Interactive Brokers' published pacing
// for historical data (60 requests per 10 minutes); the shorter windows
// smooth bursts below it (20 per minute, 2 per second).
func DefaultWindows() []Window {
	return []Window{
		{Size: 10 * time.Minute, Limit: 60},
		{Size: time.Minute, Limit: 20},
		{Size: time.Second, Limit: 2},
	}
}

// Config configures a Limiter.
type Config struct {
	// Source names the rate-limited upstream, e.g. "ib". Required.
	Source string
	// Kind is the request class in the key (default "historical").
	Kind string
	// Windows are checked together (default DefaultWindows()).
	Windows []Window
	// KeyPrefix is prepended to every key (default none), for isolation in
	// tests or a shared Redis.
	KeyPrefix string
	// TTLBuffer is added to each window when setting a key's TTL
	// (default 1s).
	TTLBuffer time.Duration
}

// WindowName returns the default name of a window of size d: the largest
// whole unit among h, m, s and ms ("10m", "1s", "1500ms").
func WindowName(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d >= time.Second && d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	default:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	}
}

func (c Config) withDefaults() (Config, error) {
	if c.Source == "" || strings.Contains(c.Source, ":") {
		return c, fmt.Errorf("ratelimit: source %q must be non-empty and without ':'", c.Source)
	}
	if c.Kind == "" {
		c.Kind = "historical"
	}
	if len(c.Windows) == 0 {
		c.Windows = DefaultWindows()
	}
	if c.TTLBuffer <= 0 {
		c.TTLBuffer = time.Second
	}
	ws := make([]Window, len(c.Windows))
	seen := map[string]bool{}
	for i, w := range c.Windows {
		if w.Size < time.Millisecond || w.Limit < 1 {
			return c, fmt.Errorf("ratelimit: window %d: size %s and limit %d must be ≥ 1ms and ≥ 1", i, w.Size, w.Limit)
		}
		if w.Name == "" {
			w.Name = WindowName(w.Size)
		}
		if seen[w.Name] {
			return c, fmt.Errorf("ratelimit: duplicate window name %q", w.Name)
		}
		seen[w.Name] = true
		ws[i] = w
	}
	c.Windows = ws
	return c, nil
}

// Decision is the outcome of one Allow call.
type Decision struct {
	// Allowed is true when the request was granted and recorded.
	Allowed bool
	// Wait is, when denied, the time until the binding window has room
	// again (at least 1µs); zero when allowed.
	Wait time.Duration
	// At is the Redis server time of the decision.
	At time.Time
}

// Limiter is a multi-window sliding-window limiter; see the package
// documentation. It is safe for concurrent use.
type Limiter struct {
	rdb    redis.Scripter
	cfg    Config
	script *redis.Script
	hold   int64 // µs: the longest window, the hold after a detected loss
	gttl   int64 // ms: the guard's TTL after a grant
	args   []any // window sizes (µs), limits and TTLs (ms), after the guard arguments
	m      *metrics

	mu   sync.Mutex
	seen map[string]seenGuard // account → what this limiter last saw
}

// seenGuard is what a Limiter remembers of one account's guard: its id and
// the server time (µs) of the limiter's own last grant.
type seenGuard struct {
	id   string
	last int64
}

// New returns a limiter on rdb and loads its script (SCRIPT LOAD). Metrics
// are registered on reg (nil: a private registry); limiters of several
// sources may share one registry. The source's series of
// sluice_ratelimit_errors_total and sluice_ratelimit_decisions_total are
// exported at 0 from the start.
func New(ctx context.Context, rdb redis.Scripter, cfg Config, reg prometheus.Registerer) (*Limiter, error) {
	if rdb == nil {
		return nil, errors.New("ratelimit: nil Redis client")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: register metrics: %w", err)
	}
	// The source's series at 0 from the start: a series that appears only
	// with its first event, at 1, is invisible to rate() and increase()
	// (the shipped SluiceRateLimiterErrors alert).
	m.errors.WithLabelValues(cfg.Source)
	for _, d := range []string{"allowed", "denied"} {
		m.decisions.WithLabelValues(cfg.Source, d)
	}
	m.lost.WithLabelValues(cfg.Source)
	l := &Limiter{rdb: rdb, cfg: cfg, script: redis.NewScript(scriptSrc), m: m, seen: map[string]seenGuard{}}
	for _, w := range cfg.Windows {
		l.args = append(l.args, w.Size.Microseconds(), w.Limit, (w.Size + cfg.TTLBuffer).Milliseconds())
		l.hold = max(l.hold, w.Size.Microseconds())
	}
	l.gttl = l.hold/1000 + cfg.TTLBuffer.Milliseconds()
	if err := l.script.Load(ctx, rdb).Err(); err != nil {
		return nil, fmt.Errorf("ratelimit: load script: %w", err)
	}
	return l, nil
}

// Source returns the limiter's source name.
func (l *Limiter) Source() string { return l.cfg.Source }

// Windows returns the configured windows (names filled in).
func (l *Limiter) Windows() []Window { return append([]Window(nil), l.cfg.Windows...) }

// Keys returns the Redis keys of account, one per window, in window order.
func (l *Limiter) Keys(account string) []string {
	keys := make([]string, len(l.cfg.Windows))
	for i, w := range l.cfg.Windows {
		keys[i] = l.key(account, w.Name)
	}
	return keys
}

// GuardKey returns the Redis key of account's guard (see Lost state).
func (l *Limiter) GuardKey(account string) string { return l.key(account, "guard") }

func (l *Limiter) key(account, suffix string) string {
	return fmt.Sprintf("%srate_limit:%s:%s:{%s}:%s", l.cfg.KeyPrefix, l.cfg.Source, l.cfg.Kind, account, suffix)
}

// guardArgs returns what the limiter last saw of account's guard.
func (l *Limiter) guardArgs(account string) seenGuard {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[account]
}

// remember records account's guard id and, when granted, the grant's
// server time now (µs). Entries whose last grant left the longest window are
// dropped as the map grows (they can no longer reveal a loss), so it holds
// about the accounts active within that window.
func (l *Limiter) remember(account, id string, now int64, granted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.seen[account]
	g.id = id
	if granted {
		g.last = now
	}
	if _, ok := l.seen[account]; !ok && len(l.seen) >= 1024 && len(l.seen)%1024 == 0 {
		for a, s := range l.seen {
			if now-s.last >= l.hold {
				delete(l.seen, a)
			}
		}
	}
	l.seen[account] = g
}

// Allow asks for one request of account. A granted request is recorded in
// every window; a denied one is not recorded. Errors are Redis failures,
// or ctx's error: Allow returns as soon as ctx ends, even when the server
// does not answer (a hung or unreachable Redis), without waiting for the
// client's timeouts. A call abandoned that way may still be granted on the
// server, which spends one grant nobody uses (the safe direction).
func (l *Limiter) Allow(ctx context.Context, account string) (Decision, error) {
	if account == "" {
		return Decision{}, errors.New("ratelimit: empty account")
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, fmt.Errorf("ratelimit: %s/%s: %w", l.cfg.Source, account, err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	seen := l.guardArgs(account)
	args := make([]any, 0, 5+len(l.args))
	args = append(args, hex.EncodeToString(id[:]), seen.id, seen.last, l.hold, l.gttl)
	args = append(args, l.args...)
	keys := append(l.Keys(account), l.GuardKey(account))
	type reply struct {
		res []any
		err error
	}
	done := make(chan reply, 1) // buffered: an abandoned call does not leak its goroutine
	t0 := time.Now()
	go func() {
		res, err := l.script.Run(ctx, l.rdb, keys, args...).Slice()
		l.m.latency.Observe(time.Since(t0).Seconds())
		done <- reply{res, err}
	}()
	var rep reply
	select {
	case rep = <-done:
	case <-ctx.Done():
		return Decision{}, fmt.Errorf("ratelimit: %s/%s: %w", l.cfg.Source, account, ctx.Err())
	}
	res, err := rep.res, rep.err
	if err != nil && ctx.Err() != nil {
		return Decision{}, fmt.Errorf("ratelimit: %s/%s: %w", l.cfg.Source, account, errors.Join(ctx.Err(), err))
	}
	if err != nil {
		l.m.errors.WithLabelValues(l.cfg.Source).Inc()
		return Decision{}, fmt.Errorf("ratelimit: %s/%s: %w", l.cfg.Source, account, err)
	}
	r, err := parseReply(res)
	if err != nil {
		return Decision{}, fmt.Errorf("ratelimit: %s/%s: %w", l.cfg.Source, account, err)
	}
	d := Decision{Allowed: r.allowed, At: time.UnixMicro(r.at)}
	if r.lost {
		l.m.lost.WithLabelValues(l.cfg.Source).Inc()
	}
	if d.Allowed {
		l.remember(account, r.guard, r.at, true)
		l.m.decisions.WithLabelValues(l.cfg.Source, "allowed").Inc()
		return d, nil
	}
	l.remember(account, r.guard, r.at, false)
	d.Wait = max(time.Duration(r.wait)*time.Microsecond, time.Microsecond)
	l.m.decisions.WithLabelValues(l.cfg.Source, "denied").Inc()
	return d, nil
}

// scriptReply is the script's answer.
type scriptReply struct {
	allowed  bool
	wait, at int64 // µs
	guard    string
	lost     bool
}

// parseReply reads {allowed, wait µs, server time µs, guard id, lost}.
func parseReply(res []any) (scriptReply, error) {
	var r scriptReply
	if len(res) != 5 {
		return r, fmt.Errorf("unexpected script reply %v", res)
	}
	ints := [4]int64{}
	for i, j := range []int{0, 1, 2, 4} {
		switch v := res[j].(type) {
		case int64:
			ints[i] = v
		case string:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return r, fmt.Errorf("unexpected script reply %v: %w", res, err)
			}
			ints[i] = n
		default:
			return r, fmt.Errorf("unexpected script reply %v", res)
		}
	}
	g, ok := res[3].(string)
	if !ok {
		return r, fmt.Errorf("unexpected script reply %v", res)
	}
	return scriptReply{allowed: ints[0] == 1, wait: ints[1], at: ints[2], guard: g, lost: ints[3] == 1}, nil
}

type metrics struct {
	decisions *prometheus.CounterVec
	errors    *prometheus.CounterVec
	lost      *prometheus.CounterVec
	latency   prometheus.Histogram
}

// newMetrics registers the collectors on reg (nil: none), or adopts the
// equal ones already registered (promreg.Shared), so that several limiters
// can share a registry.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f := promreg.Shared(reg)
	m := &metrics{
		decisions: f.CounterVec("sluice_ratelimit_decisions_total", "Rate limiter decisions, per source and decision (allowed, denied).", "source", "decision"),
		errors:    f.CounterVec("sluice_ratelimit_errors_total", "Rate limiter calls that failed (Redis errors), per source.", "source"),
		lost:      f.CounterVec("sluice_ratelimit_state_lost_total", "Times the limiter found a pair's Redis state lost (restart without persistence, lost writes, eviction) and held its grants for the longest window, per source.", "source"),
		latency:   f.Histogram("sluice_ratelimit_call_duration_seconds", "Latency of one limiter script call.", prometheus.ExponentialBuckets(0.00005, 2, 14)),
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	return m, nil
}
