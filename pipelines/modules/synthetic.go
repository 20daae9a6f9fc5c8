package modules

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// The modules the Synthetic source serves.
const (
	ModuleOptionsFlow   = "options_flow"
	ModuleDarkPool      = "dark_pool"
	ModuleShortInterest = "short_interest"
	ModulePriceAction   = "price_action"
)

// SyntheticConfig configures the Synthetic source. Now and Sleep default
// to the wall clock and a timer that ends early with ctx.
type SyntheticConfig struct {
	// Latency is added to every call (MODULES_SYNTHETIC_LATENCY).
	Latency time.Duration
	// Faults are injected per ticker or key (MODULES_SYNTHETIC_FAULTS).
	Faults Faults
	Now    func() time.Time
	Sleep  func(ctx context.Context, d time.Duration) error
}

// Synthetic is the deterministic default ModuleSource: the payload of a
// ticker × module is a function of the ticker, the module and the time
// bucket of the call, so that it changes once per bucket — options_flow
// hourly, price_action every 5 minutes, dark_pool daily (UTC), and
// short_interest twice a month (from the 1st and from the 16th, the
// bucket's first day being its data_date; the others have none). It
// serves these four modules only. Faults make chosen tickers or keys
// fail. Safe for concurrent use.
type Synthetic struct {
	cfg   SyntheticConfig
	mu    sync.Mutex
	calls map[string]int // calls per key, for transient:N
}

// NewSynthetic returns a Synthetic source.
func NewSynthetic(cfg SyntheticConfig) *Synthetic {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	return &Synthetic{cfg: cfg, calls: map[string]int{}}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Fetch implements ModuleSource.
func (s *Synthetic) Fetch(ctx context.Context, ticker, module string) (Snapshot, error) {
	ticker = NormalizeTicker(ticker)
	start, dataDate, ok := syntheticBucket(module, s.cfg.Now())
	if !ok {
		return Snapshot{}, fmt.Errorf("synthetic source: %q: %w", module, ErrUnsupportedModule)
	}
	key := Key(ticker, module)
	s.mu.Lock()
	s.calls[key]++
	call := s.calls[key]
	s.mu.Unlock()

	if s.cfg.Latency > 0 {
		if err := s.cfg.Sleep(ctx, s.cfg.Latency); err != nil {
			return Snapshot{}, fmt.Errorf("synthetic source: %w", err)
		}
	}
	if f, ok := s.cfg.Faults.For(ticker, module); ok {
		switch f.Kind {
		case FaultTransient:
			if f.Count == 0 || call <= f.Count {
				return Snapshot{}, &UpstreamError{Status: 503, Message: "synthetic transient fault"}
			}
		case FaultNotFound:
			return Snapshot{}, &UpstreamError{Status: 404, Message: "synthetic: no such ticker"}
		case FaultRateLimited:
			return Snapshot{}, &UpstreamError{Status: 429, RetryAfter: f.Duration, Message: "synthetic rate limit"}
		case FaultUnauthorized:
			return Snapshot{}, &UpstreamError{Status: 401, Message: "synthetic: bad credentials"}
		case FaultLatency:
			if err := s.cfg.Sleep(ctx, f.Duration); err != nil {
				return Snapshot{}, fmt.Errorf("synthetic source: %w", err)
			}
		case FaultTooLarge:
			const frame = len(`{"padding":""}`)
			return Snapshot{Payload: json.RawMessage(`{"padding":"` + strings.Repeat("x", MaxPayloadBytes+1-frame) + `"}`)}, nil
		}
	}
	payload, err := json.Marshal(syntheticPayload(ticker, module, start, dataDate))
	if err != nil {
		return Snapshot{}, fmt.Errorf("synthetic source: %w", err)
	}
	return Snapshot{Payload: payload, DataDate: dataDate}, nil
}

// syntheticBucket returns the start of the bucket of module containing
// now, and its data date (short_interest only).
func syntheticBucket(module string, now time.Time) (start time.Time, dataDate string, ok bool) {
	now = now.UTC()
	y, m, d := now.Date()
	switch module {
	case ModuleOptionsFlow:
		return now.Truncate(time.Hour), "", true
	case ModulePriceAction:
		return now.Truncate(5 * time.Minute), "", true
	case ModuleDarkPool:
		return time.Date(y, m, d, 0, 0, 0, 0, time.UTC), "", true
	case ModuleShortInterest:
		day := 1
		if d >= 16 {
			day = 16
		}
		start = time.Date(y, m, day, 0, 0, 0, 0, time.UTC)
		return start, start.Format(time.DateOnly), true
	}
	return time.Time{}, "", false
}

// syntheticPayload builds the payload of a bucket from a generator seeded
// with its identity.
func syntheticPayload(ticker, module string, start time.Time, dataDate string) map[string]any {
	seed := sha256.Sum256([]byte(ticker + "|" + module + "|" + start.Format(time.RFC3339)))
	r := rand.New(rand.NewChaCha8(seed))
	base := syntheticBasePrice(ticker)
	price := func() float64 { return cents(base * (0.95 + 0.1*r.Float64())) }
	out := map[string]any{"ticker": ticker, "source": "synthetic"}
	switch module {
	case ModuleOptionsFlow:
		out["bucket_start"] = start
		flows := make([]map[string]any, 3+r.IntN(6))
		for i := range flows {
			kind := "call"
			if r.IntN(2) == 0 {
				kind = "put"
			}
			side := "ask"
			if r.IntN(3) == 0 {
				side = "bid"
			}
			size := 10 + r.IntN(990)
			premium := cents(float64(size) * (0.5 + 20*r.Float64()) * 100)
			flows[i] = map[string]any{
				"id":      fmt.Sprintf("%x-%d", seed[:4], i),
				"type":    kind,
				"strike":  math.Round(base*(0.8+0.4*r.Float64())/5) * 5,
				"expiry":  start.AddDate(0, 0, 7*(1+r.IntN(12))).Format(time.DateOnly),
				"side":    side,
				"size":    size,
				"premium": premium,
			}
		}
		out["flows"] = flows
	case ModulePriceAction:
		open, close := price(), price()
		out["bucket_start"] = start
		out["interval"] = "5m"
		out["open"], out["close"] = open, close
		out["high"] = cents(math.Max(open, close) * (1 + 0.01*r.Float64()))
		out["low"] = cents(math.Min(open, close) * (1 - 0.01*r.Float64()))
		out["volume"] = 1000 + r.IntN(500000)
	case ModuleDarkPool:
		out["date"] = start.Format(time.DateOnly)
		prints := make([]map[string]any, 2+r.IntN(8))
		total := 0
		for i := range prints {
			size := 100 * (1 + r.IntN(5000))
			total += size
			prints[i] = map[string]any{"price": price(), "size": size}
		}
		out["prints"] = prints
		out["total_size"] = total
	case ModuleShortInterest:
		out["settlement_date"] = dataDate
		out["short_interest"] = 100000 + r.IntN(50000000)
		out["days_to_cover"] = cents(0.5 + 9.5*r.Float64())
		out["short_float_pct"] = cents(0.5 + 30*r.Float64())
	}
	return out
}

// syntheticBasePrice is a ticker's price level, between 20 and 520.
func syntheticBasePrice(ticker string) float64 {
	h := sha256.Sum256([]byte(ticker))
	return 20 + float64(uint16(h[0])<<8|uint16(h[1]))/65535*500
}

func cents(x float64) float64 { return math.Round(x*100) / 100 }
