package trades

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"

	"github.com/sluicehq/sluice/internal/promreg"
)

// The sim answers "what if I had held?" for one trade: the P/L of holding
// the trade's quantity for the horizon against what the user actually did.
//
// For a trade at ts with horizon H, close_H is the last 1 h close at or
// before ts + H.
//   - BUY: hold = qty × (close_H − price); actual = Σ (sell price − price) ×
//     q over the quantities q of this lot that the user's FIFO SELLs closed
//     at or before ts + H, plus the rest still open × (close_H − price).
//   - SELL: hold = qty × (close_H − price) (the P/L the sold quantity would
//     have made had it been kept); actual = 0.
//
// delta = hold − actual. Fees are excluded. The curves have one point per
// hourly bar with ts <= bar <= ts + H, evaluated with that bar's close and
// the SELLs up to it. Amounts are exact and serialised with 8 fractional
// digits (Fixed8).

// Horizon bounds of the sim, in days.
const (
	MinSimHorizonDays     = 1
	MaxSimHorizonDays     = 90
	DefaultSimHorizonDays = 7
)

// SimCacheTTL is how long a sim answer stays in Redis.
const SimCacheTTL = time.Hour

// SimPoint is one point of the curves: the P/L of holding and of what the
// user did, at the close of the bar at TS.
type SimPoint struct {
	TS     time.Time `json:"ts"`
	Hold   Fixed8    `json:"hold"`
	Actual Fixed8    `json:"actual"`
}

// SimResult is the sim's answer. Delta is null when there is no bar.
// Coverage is the share of the horizon's whole hours that have a bar (4
// decimals); Partial is true when it is below 1 (bars only up to now, gaps,
// or a vendor that kept answering 429). Cached is true when the answer came
// from Redis.
type SimResult struct {
	UserID      string     `json:"user_id"`
	TradeID     string     `json:"trade_id"`
	Symbol      string     `json:"symbol"`
	Side        Side       `json:"side"`
	HorizonDays int        `json:"horizon_days"`
	Source      string     `json:"source"`
	Curves      []SimPoint `json:"curves"`
	Delta       *Fixed8    `json:"delta"`
	Cached      bool       `json:"cached"`
	Partial     bool       `json:"partial"`
	Coverage    float64    `json:"coverage"`
}

// Simulate computes the sim of trade t over horizon from the user's trades
// in t's symbol (history: any order, t included; trades after ts + horizon
// are ignored) and the 1 h bars of the symbol (any order; bars outside
// [ts, ts + horizon] are ignored). It is a pure function.
func Simulate(t Trade, history []Trade, bars []Bar, horizon time.Duration) SimResult {
	end := t.TS.Add(horizon)
	in := make([]Bar, 0, len(bars))
	for _, b := range sortBars(bars) {
		if !b.TS.Before(t.TS) && !b.TS.After(end) {
			in = append(in, b)
		}
	}
	res := SimResult{
		UserID: t.UserID, TradeID: t.ID, Symbol: t.Symbol, Side: t.Side,
		HorizonDays: int(horizon / (24 * time.Hour)), Curves: []SimPoint{},
	}
	expected := int(end.Sub(ceilHour(t.TS))/time.Hour) + 1
	res.Coverage = math.Round(min(1, float64(len(in))/float64(expected))*1e4) / 1e4
	res.Partial = len(in) < expected

	var closes []lotClose
	if t.Side == Buy {
		closes = lotCloses(t, history, end)
	}
	// at evaluates hold and actual with close c and the closes up to ts.
	at := func(c decimal.Decimal, ts time.Time) (hold, actual decimal.Decimal) {
		move := c.Sub(t.Price)
		hold = t.Qty.Mul(move)
		if t.Side == Sell {
			return hold, decimal.Zero
		}
		rest, realized := t.Qty, decimal.Zero
		for _, lc := range closes {
			if lc.ts.After(ts) {
				break
			}
			realized = realized.Add(lc.price.Sub(t.Price).Mul(lc.qty))
			rest = rest.Sub(lc.qty)
		}
		return hold, realized.Add(rest.Mul(move))
	}
	for _, b := range in {
		hold, actual := at(b.Close, b.TS)
		res.Curves = append(res.Curves, SimPoint{TS: b.TS, Hold: Fixed8{hold}, Actual: Fixed8{actual}})
	}
	if len(in) > 0 {
		hold, actual := at(in[len(in)-1].Close, end)
		res.Delta = &Fixed8{hold.Sub(actual)}
	}
	return res
}

// lotClose is the part of a BUY lot one SELL closed: when, how much, at
// which price.
type lotClose struct {
	ts    time.Time
	qty   decimal.Decimal
	price decimal.Decimal
}

// lotCloses replays the user's trades in buy's symbol up to end through a
// FIFO Ledger and returns the closes of buy's lot, in time order.
func lotCloses(buy Trade, history []Trade, end time.Time) []lotClose {
	hist := make([]Trade, 0, len(history))
	for _, h := range history {
		if h.Symbol == buy.Symbol && !h.TS.After(end) {
			hist = append(hist, h)
		}
	}
	SortHistory(hist)
	idx := slices.IndexFunc(hist, func(h Trade) bool { return h.ID == buy.ID })
	if idx < 0 {
		return nil
	}
	l := NewLedger()
	var out []lotClose
	for i, h := range hist {
		f := l.Apply(i, h)
		for _, m := range f.Lots {
			if m.BuyIdx == idx {
				out = append(out, lotClose{ts: h.TS, qty: m.Qty, price: h.Price})
			}
		}
	}
	return out
}

// SimConfig configures a Sim.
type SimConfig struct {
	// Trades reads the trade and its symbol's history. Required.
	Trades TradeStore
	// Stored are the bars of market_bars; a symbol with at least one bar
	// in the horizon there uses them (source market_bars). Required.
	Stored BarSource
	// Vendor is the market-data vendor (source marketdata), used when
	// market_bars has no bar in the horizon; its errors wrapping
	// ErrVendorRateLimited are retried. Required.
	Vendor BarSource
	// Cache is Redis (DB 0 in production). Required.
	Cache redis.Cmdable
	// Registerer takes sluice_trades_sim_requests_total and
	// sluice_trades_vendor_429_total (nil: none).
	Registerer prometheus.Registerer
	// RetryWaits are the waits before the vendor retries after a 429
	// (default 1 s, 5 s: three calls in all).
	RetryWaits []time.Duration
	// Sleep waits d or until ctx ends (default: a timer).
	Sleep func(ctx context.Context, d time.Duration) error
}

// Sim serves sim requests: cache, bars, Simulate. Safe for concurrent use.
type Sim struct {
	cfg      SimConfig
	requests *prometheus.CounterVec
	vendor   prometheus.Counter
}

// Errors of Sim.Run besides the stores': ErrSimHorizon for a horizon
// outside 1–90 days, and ErrTradeNotFound (wrapped) for an unknown trade.
var ErrSimHorizon = fmt.Errorf("horizon_days must be an integer from %d to %d", MinSimHorizonDays, MaxSimHorizonDays)

// NewSim returns a Sim; it registers its metrics on cfg.Registerer.
func NewSim(cfg SimConfig) (*Sim, error) {
	if cfg.Trades == nil || cfg.Stored == nil || cfg.Vendor == nil || cfg.Cache == nil {
		return nil, errors.New("trades sim: Trades, Stored, Vendor and Cache are required")
	}
	if cfg.RetryWaits == nil {
		cfg.RetryWaits = []time.Duration{time.Second, 5 * time.Second}
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	f := promreg.Shared(cfg.Registerer)
	requests := f.CounterVec("sluice_trades_sim_requests_total",
		"Sim requests, per cache outcome (hit, miss, none) and result (ok, partial, not_found, bad_request, error).",
		"cache", "result")
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("trades sim: register metrics: %w", err)
	}
	v429, err := NewVendor429Counter(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Sim{cfg: cfg, requests: requests, vendor: v429.WithLabelValues(Vendor429Vendor)}, nil
}

// SimCacheKey is the Redis key of a sim answer:
// sim:{user_id}:{trade_id}:{horizon_days}:{source}.
func SimCacheKey(userID, tradeID string, horizonDays int, source string) string {
	return fmt.Sprintf("sim:%s:%s:%d:%s", userID, tradeID, horizonDays, source)
}

// Run answers a sim request. The trade is read first (unknown:
// ErrTradeNotFound); the source is market_bars when the table has a bar of
// the symbol in the horizon, else marketdata; a cached answer under that
// source's key is returned as is (Cached true). Otherwise the answer is
// computed and cached for SimCacheTTL, except when the vendor was still
// rate limited after the retries: that answer is partial (no bars) and not
// cached. A Redis failure is an error, not a miss.
func (s *Sim) Run(ctx context.Context, userID, tradeID string, horizonDays int) (SimResult, error) {
	res, cache, err := s.run(ctx, userID, tradeID, horizonDays)
	result := "ok"
	switch {
	case errors.Is(err, ErrSimHorizon):
		result = "bad_request"
	case errors.Is(err, ErrTradeNotFound):
		result = "not_found"
	case err != nil:
		result = "error"
	case res.Partial:
		result = "partial"
	}
	s.requests.WithLabelValues(cache, result).Inc()
	return res, err
}

func (s *Sim) run(ctx context.Context, userID, tradeID string, horizonDays int) (SimResult, string, error) {
	if horizonDays < MinSimHorizonDays || horizonDays > MaxSimHorizonDays {
		return SimResult{}, "none", fmt.Errorf("horizon_days %d: %w", horizonDays, ErrSimHorizon)
	}
	if err := CheckUserID(userID); err != nil {
		return SimResult{}, "none", fmt.Errorf("%w: %w", ErrTradeNotFound, err)
	}
	t, err := s.cfg.Trades.Trade(ctx, userID, tradeID)
	if err != nil {
		return SimResult{}, "none", err
	}
	horizon := time.Duration(horizonDays) * 24 * time.Hour
	end := t.TS.Add(horizon)
	bars, err := s.cfg.Stored.Bars(ctx, t.Symbol, t.TS, end)
	if err != nil {
		return SimResult{}, "none", err
	}
	source := SourceMarketBars
	if len(bars) == 0 {
		source = SourceMarketData
	}
	key := SimCacheKey(userID, t.ID, horizonDays, source)
	cached, err := s.cfg.Cache.Get(ctx, key).Bytes()
	switch {
	case err == nil:
		var res SimResult
		if err := json.Unmarshal(cached, &res); err != nil {
			return SimResult{}, "hit", fmt.Errorf("sim cache %s: %w", key, err)
		}
		res.Cached = true
		return res, "hit", nil
	case !errors.Is(err, redis.Nil):
		return SimResult{}, "miss", fmt.Errorf("sim cache %s: %w", key, err)
	}
	limited := false
	if source == SourceMarketData {
		if bars, limited, err = s.vendorBars(ctx, t.Symbol, t.TS, end); err != nil {
			return SimResult{}, "miss", err
		}
	}
	history, err := s.cfg.Trades.SymbolHistory(ctx, userID, t.Symbol, end)
	if err != nil {
		return SimResult{}, "miss", err
	}
	res := Simulate(t, history, bars, horizon)
	res.HorizonDays, res.Source = horizonDays, source
	if limited {
		return res, "miss", nil
	}
	body, err := json.Marshal(res)
	if err != nil {
		return SimResult{}, "miss", fmt.Errorf("sim cache %s: %w", key, err)
	}
	if err := s.cfg.Cache.Set(ctx, key, body, SimCacheTTL).Err(); err != nil {
		return SimResult{}, "miss", fmt.Errorf("sim cache %s: %w", key, err)
	}
	return res, "miss", nil
}

// vendorBars calls the vendor, retrying a 429 after each of RetryWaits;
// limited is true when the last call was still rate limited (no bars).
func (s *Sim) vendorBars(ctx context.Context, symbol string, from, to time.Time) (bars []Bar, limited bool, err error) {
	for attempt := 0; ; attempt++ {
		bars, err = s.cfg.Vendor.Bars(ctx, symbol, from, to)
		if !errors.Is(err, ErrVendorRateLimited) {
			return bars, false, err
		}
		s.vendor.Inc()
		if attempt == len(s.cfg.RetryWaits) {
			return nil, true, nil
		}
		if err := s.cfg.Sleep(ctx, s.cfg.RetryWaits[attempt]); err != nil {
			return nil, false, fmt.Errorf("market data %s: %w", symbol, err)
		}
	}
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
