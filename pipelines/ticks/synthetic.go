package ticks

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// SyntheticConfig configures the Synthetic source. Zero fields take the
// documented defaults.
type SyntheticConfig struct {
	// Location is the exchange time zone (default America/New_York).
	Location *time.Location
	// Open is the session start as an offset from local midnight
	// (default 9h30m).
	Open time.Duration
	// Length is the session length (default 6h30m). The demo and tests use
	// minutes.
	Length time.Duration
	// MeanGap is the mean time between ticks (default 1s); gaps are uniform
	// in [1ms, 2·MeanGap−1ms], so every tick has its own millisecond.
	MeanGap time.Duration
	// Latency is added to every HistoricalTicks call (default none).
	Latency time.Duration
	// Fault, when set, is called before every HistoricalTicks call with the
	// 1-based call number; a non-nil error is returned instead of ticks.
	// Use it to inject IB-like errors (GatewayTimeout, PacingViolation).
	Fault func(call int64, symbol string, startMs int64) error
}

// Synthetic is a deterministic tick source: the ticks of a symbol on a date
// are a random walk seeded by the symbol and the date, so every call — in
// any process — sees the same ticks. It is safe for concurrent use.
type Synthetic struct {
	cfg   SyntheticConfig
	calls atomic.Int64
	mu    sync.Mutex
	cache map[string][]Tick
}

// NewSynthetic returns a synthetic source.
func NewSynthetic(cfg SyntheticConfig) *Synthetic {
	if cfg.Location == nil {
		if loc, err := time.LoadLocation("America/New_York"); err == nil {
			cfg.Location = loc
		} else {
			cfg.Location = time.FixedZone("EST", -5*3600)
		}
	}
	if cfg.Open == 0 {
		cfg.Open = 9*time.Hour + 30*time.Minute
	}
	if cfg.Length <= 0 {
		cfg.Length = 6*time.Hour + 30*time.Minute
	}
	if cfg.MeanGap < 2*time.Millisecond {
		cfg.MeanGap = time.Second
	}
	return &Synthetic{cfg: cfg, cache: map[string][]Tick{}}
}

// Calls returns the number of HistoricalTicks calls so far.
func (s *Synthetic) Calls() int64 { return s.calls.Load() }

// TradingHours implements Source: the session opens at Open local time and
// lasts Length; its one critical range is the whole session.
func (s *Synthetic) TradingHours(_ context.Context, symbol, date string) (Session, error) {
	if err := ValidateSymbol(symbol); err != nil {
		return Session{}, &SourceError{Type: ErrTypeNoContract, Err: err}
	}
	day, err := time.ParseInLocation(time.DateOnly, date, s.cfg.Location)
	if err != nil {
		return Session{}, &SourceError{Type: ErrTypeNoContract, Err: fmt.Errorf("date %q: %w", date, err)}
	}
	// Open is wall-clock time: on a day the clocks change, local midnight
	// plus Open as a duration would be an hour off.
	start := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, int(s.cfg.Open), s.cfg.Location).UnixMilli()
	end := start + s.cfg.Length.Milliseconds() - 1
	return Session{Start: start, End: end, CriticalRanges: [][2]int64{{start, end}}}, nil
}

// Ticks returns every tick of the session (for tests and benchmarks).
func (s *Synthetic) Ticks(symbol, date string) ([]Tick, error) {
	sess, err := s.TradingHours(context.Background(), symbol, date)
	if err != nil {
		return nil, err
	}
	return s.session(symbol, date, sess), nil
}

func (s *Synthetic) session(symbol, date string, sess Session) []Tick {
	k := symbol + "|" + date
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts, ok := s.cache[k]; ok {
		return ts
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(k))
	rng := rand.New(rand.NewPCG(h.Sum64(), 0x51C3))
	price := 50 + float64(h.Sum64()%45000)/100
	gap := s.cfg.MeanGap.Milliseconds()
	var ts []Tick
	for t := sess.Start + rng.Int64N(gap); t <= sess.End; t += 1 + rng.Int64N(2*gap-1) {
		price = math.Max(0.25, price+0.25*float64(rng.IntN(5)-2))
		ts = append(ts, Tick{TimeMs: t, Price: price, Size: 1 + rng.Int64N(500)})
	}
	s.cache[k] = ts
	return ts
}

// HistoricalTicks implements Source: up to max ticks with startMs ≤ time ≤
// endMs. The symbol's date is the local date of startMs.
func (s *Synthetic) HistoricalTicks(ctx context.Context, symbol string, startMs, endMs int64, max int) ([]Tick, error) {
	call := s.calls.Add(1)
	if s.cfg.Latency > 0 {
		t := time.NewTimer(s.cfg.Latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	if s.cfg.Fault != nil {
		if err := s.cfg.Fault(call, symbol, startMs); err != nil {
			return nil, err
		}
	}
	if max <= 0 || max > 1000 {
		return nil, &SourceError{Type: ErrTypeUnknown, Err: errors.New("max ticks must be within 1..1000")}
	}
	date := time.UnixMilli(startMs).In(s.cfg.Location).Format(time.DateOnly)
	sess, err := s.TradingHours(ctx, symbol, date)
	if err != nil {
		return nil, err
	}
	all := s.session(symbol, date, sess)
	i := sort.Search(len(all), func(i int) bool { return all[i].TimeMs >= startMs })
	var out []Tick
	for ; i < len(all) && len(out) < max && all[i].TimeMs <= endMs; i++ {
		out = append(out, all[i])
	}
	return out, nil
}

// FaultEvery returns a Fault that fails every n-th call with mk().
func FaultEvery(n int64, mk func() error) func(int64, string, int64) error {
	return func(call int64, _ string, _ int64) error {
		if n > 0 && call%n == 0 {
			return mk()
		}
		return nil
	}
}
