package trades

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/stages/ratelimit"
)

var simT0 = time.Date(2025, 1, 6, 10, 0, 0, 0, time.UTC)

func simTrade(user, ext string, side Side, qty, price string, ts time.Time) Trade {
	return Trade{
		ID: TradeID(user, "synthetic", ext), UserID: user, Broker: "synthetic", ExtID: ext, Symbol: "BTC-USD",
		Side: side, Qty: decimal.RequireFromString(qty), Price: decimal.RequireFromString(price),
		Fee: decimal.RequireFromString("1.5"), TS: ts,
	}
}

// hourlyBars returns n bars from start, one an hour, closing at base + i.
func hourlyBars(start time.Time, n int, base int64) []Bar {
	bars := make([]Bar, n)
	for i := range bars {
		bars[i] = Bar{TS: start.Add(time.Duration(i) * time.Hour), Close: decimal.NewFromInt(base + int64(i))}
	}
	return bars
}

func fx(s string) string { return decimal.RequireFromString(s).StringFixedBank(PnLPlaces) }

func TestSimulate(t *testing.T) {
	t.Parallel()
	// The user's BTC-USD history: an older lot of 3, the simulated BUY of
	// 10 at 100, a SELL of 5 at 105 two and a half hours later (FIFO: 3 from
	// the older lot, 2 from this one), a SELL after the horizon.
	older := simTrade("u1", "b0", Buy, "3", "90", simT0.Add(-time.Hour))
	buy := simTrade("u1", "b1", Buy, "10", "100", simT0)
	sell := simTrade("u1", "s1", Sell, "5", "105", simT0.Add(150*time.Minute))
	late := simTrade("u1", "s2", Sell, "1", "110", simT0.Add(48*time.Hour))
	short := simTrade("u1", "s3", Sell, "2", "50", simT0)
	history := []Trade{late, sell, buy, older}
	day := 24 * time.Hour

	type point struct {
		i            int
		hold, actual string
	}
	cases := []struct {
		name     string
		trade    Trade
		history  []Trade
		bars     []Bar
		horizon  time.Duration
		points   int
		check    []point
		delta    string // "" = null
		partial  bool
		coverage float64
	}{
		{
			// close_H = 124: hold = 10 × 24; actual = (105 − 100) × 2 + 8 × 24.
			name: "BUY with partial FIFO sells within the horizon", trade: buy, history: history,
			bars: hourlyBars(simT0.Add(-2*time.Hour), 30, 98), horizon: day, points: 25,
			check: []point{{0, "0", "0"}, {2, "20", "20"}, {3, "30", "34"}, {24, "240", "202"}},
			delta: "38", coverage: 1,
		},
		{
			// the SELL at 12:30 sold all of the lot: actual = (105 − 100) × 10.
			name: "BUY fully closed within the horizon", trade: simTrade("u1", "b1", Buy, "2", "100", simT0),
			history: []Trade{sell, simTrade("u1", "b1", Buy, "2", "100", simT0), older},
			bars:    hourlyBars(simT0, 25, 100), horizon: day, points: 25,
			check: []point{{3, "6", "10"}, {24, "48", "10"}},
			delta: "38", coverage: 1,
		},
		{
			name: "SELL: hold is what the sold quantity would have made, actual 0", trade: short, history: history,
			bars: hourlyBars(simT0, 25, 40), horizon: day, points: 25,
			check: []point{{0, "-20", "0"}, {24, "28", "0"}},
			delta: "28", coverage: 1,
		},
		{
			name: "no bars", trade: buy, history: history, horizon: day, points: 0, delta: "", partial: true, coverage: 0,
		},
		{
			// bars only up to now, 12 of the 25 hours: close_H is the last one (111).
			name: "partial coverage", trade: buy, history: history,
			bars: hourlyBars(simT0, 12, 100), horizon: day, points: 12,
			check: []point{{11, "110", "98"}}, delta: "12", partial: true, coverage: 0.48,
		},
		{
			// 10:37 on a 1-day horizon holds the 24 whole hours 11:00 … 10:00.
			name: "trade between hours", trade: simTrade("u1", "b9", Buy, "1", "100", simT0.Add(37*time.Minute)),
			bars: hourlyBars(simT0, 26, 100), horizon: day, points: 24,
			check: []point{{0, "1", "1"}, {23, "24", "24"}}, delta: "0", coverage: 1,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res := Simulate(c.trade, c.history, c.bars, c.horizon)
			if len(res.Curves) != c.points {
				t.Fatalf("%d points, want %d", len(res.Curves), c.points)
			}
			for i, p := range res.Curves {
				want := c.trade.TS.Add(time.Duration(i) * time.Hour)
				if c.trade.TS.Minute() != 0 {
					want = ceilHour(c.trade.TS).Add(time.Duration(i) * time.Hour)
				}
				if !p.TS.Equal(want) {
					t.Errorf("point %d at %s, want %s", i, p.TS, want)
				}
			}
			for _, p := range c.check {
				got := res.Curves[p.i]
				if fixed8(got.Hold.Decimal) != fx(p.hold) || fixed8(got.Actual.Decimal) != fx(p.actual) {
					t.Errorf("point %d: hold %s actual %s, want %s %s", p.i, fixed8(got.Hold.Decimal),
						fixed8(got.Actual.Decimal), fx(p.hold), fx(p.actual))
				}
			}
			switch {
			case c.delta == "" && res.Delta != nil:
				t.Errorf("delta %s, want null", fixed8(res.Delta.Decimal))
			case c.delta != "" && (res.Delta == nil || fixed8(res.Delta.Decimal) != fx(c.delta)):
				t.Errorf("delta %v, want %s", res.Delta, fx(c.delta))
			}
			if res.Partial != c.partial || res.Coverage != c.coverage {
				t.Errorf("partial %v coverage %v, want %v %v", res.Partial, res.Coverage, c.partial, c.coverage)
			}
		})
	}
}

// The answer's decimals are strings with 8 fractional digits, as the
// domain serialises P/L; a missing delta is null.
func TestSimResultJSON(t *testing.T) {
	t.Parallel()
	buy := simTrade("u1", "b1", Buy, "0.5", "100.123", simT0)
	res := Simulate(buy, []Trade{buy}, hourlyBars(simT0, 2, 101), time.Hour)
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"hold":"0.43850000"`, `"actual":"0.43850000"`, `"delta":"0.00000000"`,
		`"coverage":1`, `"partial":false`, `"side":"BUY"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	b, _ = json.Marshal(Simulate(buy, nil, nil, time.Hour))
	if !strings.Contains(string(b), `"delta":null`) || !strings.Contains(string(b), `"curves":[]`) {
		t.Errorf("no bars: %s", b)
	}
}

// memTrades is a TradeStore over a slice.
type memTrades []Trade

func (m memTrades) Trade(_ context.Context, userID, id string) (Trade, error) {
	for _, t := range m {
		if t.UserID == userID && t.ID == id {
			return t, nil
		}
	}
	return Trade{}, fmt.Errorf("trade %s: %w", id, ErrTradeNotFound)
}

func (m memTrades) SymbolHistory(_ context.Context, userID, symbol string, until time.Time) ([]Trade, error) {
	var out []Trade
	for _, t := range m {
		if t.UserID == userID && t.Symbol == symbol && !t.TS.After(until) {
			out = append(out, t)
		}
	}
	return out, nil
}

// fakeBars counts its calls; the first fail calls answer 429.
type fakeBars struct {
	mu    sync.Mutex
	bars  []Bar
	fail  int
	calls int
}

func (f *fakeBars) Bars(_ context.Context, _ string, from, to time.Time) ([]Bar, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.fail {
		return nil, fmt.Errorf("vendor: %w", ErrVendorRateLimited)
	}
	var out []Bar
	for _, b := range f.bars {
		if !b.TS.Before(from) && !b.TS.After(to) {
			out = append(out, b)
		}
	}
	return out, nil
}

type simRig struct {
	sim    *Sim
	reg    *prometheus.Registry
	rdb    redis.Cmdable
	stored *fakeBars
	vendor *fakeBars
	waits  []time.Duration
	user   string
	buy    Trade
}

// newSimRig builds a Sim on rdb for a fresh user with one BUY and a SELL.
func newSimRig(t *testing.T, rdb redis.Cmdable) *simRig {
	t.Helper()
	r := &simRig{reg: prometheus.NewRegistry(), rdb: rdb, stored: &fakeBars{},
		vendor: &fakeBars{bars: hourlyBars(simT0, 24*7+1, 100)}, user: fmt.Sprintf("simu-%016x", rand.Uint64())}
	r.buy = simTrade(r.user, "b1", Buy, "10", "100", simT0)
	sell := simTrade(r.user, "s1", Sell, "4", "110", simT0.Add(5*time.Hour))
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, "sim:"+r.user+":*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	})
	var err error
	r.sim, err = NewSim(SimConfig{
		Trades: memTrades{r.buy, sell}, Stored: r.stored, Vendor: r.vendor, Cache: rdb, Registerer: r.reg,
		Sleep: func(_ context.Context, d time.Duration) error { r.waits = append(r.waits, d); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *simRig) requests(t *testing.T, cache, result string) float64 {
	t.Helper()
	return testkit.Metric(t, r.reg, "sluice_trades_sim_requests_total", "cache", cache, "result", result)
}

// A miss computes from the vendor and caches under
// sim:{user}:{trade}:{horizon}:marketdata for an hour; a hit returns the
// same answer marked cached without calling the vendor.
func TestSimCache(t *testing.T) {
	t.Parallel()
	backends := map[string]func(t *testing.T) redis.Cmdable{
		"miniredis": func(t *testing.T) redis.Cmdable {
			rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		},
		// REDIS_URL when set (the real server), else a local or fake one.
		"testkit": func(t *testing.T) redis.Cmdable { return testkit.NewRedis(t, testkit.FakeOK()).Client },
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r := newSimRig(t, open(t))
			first, err := r.sim.Run(ctx, r.user, r.buy.ID, 7)
			if err != nil {
				t.Fatal(err)
			}
			if first.Cached || first.Partial || first.Source != SourceMarketData || len(first.Curves) != 24*7+1 {
				t.Fatalf("first: cached %v partial %v source %s points %d", first.Cached, first.Partial, first.Source, len(first.Curves))
			}
			key := fmt.Sprintf("sim:%s:%s:7:marketdata", r.user, r.buy.ID)
			ttl, err := r.rdb.TTL(ctx, key).Result()
			if err != nil || ttl <= 59*time.Minute || ttl > time.Hour {
				t.Fatalf("TTL of %s = %v (%v), want about 1h", key, ttl, err)
			}
			second, err := r.sim.Run(ctx, r.user, r.buy.ID, 7)
			if err != nil {
				t.Fatal(err)
			}
			if !second.Cached || fixed8(second.Delta.Decimal) != fixed8(first.Delta.Decimal) || len(second.Curves) != len(first.Curves) {
				t.Fatalf("second: cached %v delta %v points %d", second.Cached, second.Delta, len(second.Curves))
			}
			if r.vendor.calls != 1 {
				t.Errorf("vendor called %d times, want 1", r.vendor.calls)
			}
			// Another horizon is another key.
			if third, err := r.sim.Run(ctx, r.user, r.buy.ID, 1); err != nil || third.Cached || len(third.Curves) != 25 {
				t.Fatalf("horizon 1: %+v %v", third, err)
			}
			if m, h := r.requests(t, "miss", "ok"), r.requests(t, "hit", "ok"); m != 2 || h != 1 {
				t.Errorf("requests miss/ok %v hit/ok %v, want 2 and 1", m, h)
			}
		})
	}
}

// With bars in market_bars the sim uses them, under the market_bars key,
// and never asks the vendor.
func TestSimStoredBars(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newSimRig(t, redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	r.stored.bars = hourlyBars(simT0, 25, 200)
	res, err := r.sim.Run(ctx, r.user, r.buy.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	// close_H = 224; the SELL of 4 at 110 is this lot's: hold 1240, actual 40 + 6 × 124.
	if res.Source != SourceMarketBars || r.vendor.calls != 0 || fixed8(res.Delta.Decimal) != fx("456") {
		t.Fatalf("source %s vendor calls %d delta %v", res.Source, r.vendor.calls, res.Delta)
	}
	if n, _ := r.rdb.Exists(ctx, SimCacheKey(r.user, r.buy.ID, 1, SourceMarketBars)).Result(); n != 1 {
		t.Errorf("market_bars key not cached")
	}
}

// A vendor that keeps answering 429 is called three times, 1 s and 5 s
// apart; the answer is partial without bars, counted, and not cached. One
// 429 followed by an answer costs one wait.
func TestSimVendor429(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newSimRig(t, redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	r.vendor.fail = 3
	res, err := r.sim.Run(ctx, r.user, r.buy.ID, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Partial || res.Coverage != 0 || len(res.Curves) != 0 || res.Delta != nil || res.Cached {
		t.Fatalf("after 3 × 429: %+v", res)
	}
	if fmt.Sprint(r.waits) != "[1s 5s]" || r.vendor.calls != 3 {
		t.Fatalf("waits %v calls %d, want [1s 5s] and 3", r.waits, r.vendor.calls)
	}
	if n, _ := r.rdb.Exists(ctx, SimCacheKey(r.user, r.buy.ID, 7, SourceMarketData)).Result(); n != 0 {
		t.Fatal("a rate-limited answer was cached")
	}
	if got := testkit.Metric(t, r.reg, "sluice_trades_vendor_429_total", "source", "vendor"); got != 3 {
		t.Errorf("vendor_429_total{source=vendor} = %v, want 3", got)
	}
	if got := r.requests(t, "miss", "partial"); got != 1 {
		t.Errorf("requests{miss,partial} = %v, want 1", got)
	}

	r.vendor.fail, r.vendor.calls, r.waits = 1, 0, nil
	res, err = r.sim.Run(ctx, r.user, r.buy.ID, 7)
	if err != nil || res.Partial || len(res.Curves) != 24*7+1 || fmt.Sprint(r.waits) != "[1s]" {
		t.Fatalf("after one 429: partial %v points %d waits %v err %v", res.Partial, len(res.Curves), r.waits, err)
	}
}

// The synthetic vendor has no bars after now: a recent trade's answer is
// partial with the share of hours that exist.
func TestSimBarsUpToNow(t *testing.T) {
	t.Parallel()
	r := newSimRig(t, redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	r.sim.cfg.Vendor = SyntheticMarketData{Now: func() time.Time { return simT0.Add(12*time.Hour + 30*time.Minute) }}
	res, err := r.sim.Run(context.Background(), r.user, r.buy.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Partial || res.Coverage != 0.52 || len(res.Curves) != 13 {
		t.Fatalf("partial %v coverage %v points %d, want true 0.52 13", res.Partial, res.Coverage, len(res.Curves))
	}
	if !res.Curves[12].TS.Equal(simT0.Add(12*time.Hour)) || !res.Curves[3].Hold.Equal(
		SyntheticClose("BTC-USD", simT0.Add(3*time.Hour)).Sub(decimal.NewFromInt(100)).Mul(decimal.NewFromInt(10))) {
		t.Errorf("curves do not follow the vendor's closes: %+v", res.Curves[3])
	}
}

// The synthetic vendor is deterministic: the same hour has the same close.
func TestSyntheticMarketData(t *testing.T) {
	t.Parallel()
	v := SyntheticMarketData{Now: func() time.Time { return simT0.Add(100 * time.Hour) }}
	a, _ := v.Bars(context.Background(), "ETH-USD", simT0.Add(-30*time.Minute), simT0.Add(3*time.Hour))
	b, _ := v.Bars(context.Background(), "ETH-USD", simT0, simT0.Add(5*time.Hour))
	if len(a) != 4 || !a[0].TS.Equal(simT0) || len(b) != 6 {
		t.Fatalf("bars %d and %d", len(a), len(b))
	}
	for i := range a {
		if !a[i].Close.Equal(b[i].Close) || a[i].Close.Sign() <= 0 {
			t.Errorf("hour %d: %s vs %s", i, a[i].Close, b[i].Close)
		}
	}
	if SyntheticClose("ETH-USD", simT0).Equal(SyntheticClose("ETH-USD", simT0.Add(time.Hour))) &&
		SyntheticClose("ETH-USD", simT0).Equal(SyntheticClose("ETH-USD", simT0.Add(2*time.Hour))) {
		t.Error("closes do not move")
	}
}

// The rate limiter (source marketdata) in front of the vendor turns a
// denial into ErrVendorRateLimited without calling the vendor.
func TestLimitedVendor(t *testing.T) {
	t.Parallel()
	rd := testkit.NewRedis(t, testkit.FakeOK())
	l, err := ratelimit.New(context.Background(), rd.Client, ratelimit.Config{
		Source: SourceMarketData, KeyPrefix: rd.Prefix, Windows: []ratelimit.Window{{Size: time.Hour, Limit: 1}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	inner := &fakeBars{bars: hourlyBars(simT0, 3, 1)}
	v := LimitedVendor{Limiter: l, Vendor: inner}
	if bars, err := v.Bars(context.Background(), "BTC-USD", simT0, simT0.Add(2*time.Hour)); err != nil || len(bars) != 3 {
		t.Fatalf("first call: %d bars, %v", len(bars), err)
	}
	_, err = v.Bars(context.Background(), "BTC-USD", simT0, simT0.Add(2*time.Hour))
	if !errors.Is(err, ErrVendorRateLimited) || inner.calls != 1 {
		t.Fatalf("second call: %v, vendor calls %d", err, inner.calls)
	}
}

// One collector serves both sources of vendor_429_total: a second
// constructor call on the same registry adopts the first's.
func TestVendor429CounterShared(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	a, err := NewVendor429Counter(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewVendor429Counter(reg)
	if err != nil {
		t.Fatal(err)
	}
	a.WithLabelValues(Vendor429Broker).Inc()
	b.WithLabelValues(Vendor429Broker).Inc()
	b.WithLabelValues(Vendor429Vendor).Inc()
	if got := testkit.Metric(t, reg, "sluice_trades_vendor_429_total", "source", "broker"); got != 2 {
		t.Errorf("broker = %v, want 2", got)
	}
	if _, err := NewSim(SimConfig{Trades: memTrades{}, Stored: &fakeBars{}, Vendor: &fakeBars{},
		Cache: redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}), Registerer: reg}); err != nil {
		t.Fatalf("a Sim on the same registry: %v", err)
	}
}

// The API answers 200 with the result, 404 for an unknown trade and 400 for
// a horizon outside 1–90 days.
func TestSimHTTP(t *testing.T) {
	t.Parallel()
	r := newSimRig(t, redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	mux := http.NewServeMux()
	for p, h := range r.sim.Routes() {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	base := "/api/v1/trades/" + r.user + "/trades/"
	code, body := get(base + r.buy.ID + "/sim")
	if code != 200 || body["horizon_days"] != float64(7) || len(body["curves"].([]any)) != 24*7+1 {
		t.Fatalf("default horizon: %d %v", code, body["horizon_days"])
	}
	if _, ok := body["delta"].(string); !ok {
		t.Errorf("delta %v is not a string", body["delta"])
	}
	if code, _ := get(base + r.buy.ID + "/sim?horizon_days=90"); code != 200 {
		t.Errorf("horizon 90: %d", code)
	}
	for _, h := range []string{"0", "91", "-3", "x", "1.5"} {
		if code, body := get(base + r.buy.ID + "/sim?horizon_days=" + h); code != 400 || body["error"] == nil {
			t.Errorf("horizon %s: %d %v", h, code, body)
		}
	}
	for _, p := range []string{base + TradeID(r.user, "synthetic", "nope") + "/sim", base + "not-a-uuid/sim",
		"/api/v1/trades/other/trades/" + r.buy.ID + "/sim"} {
		if code, _ := get(p); code != 404 {
			t.Errorf("%s: %d, want 404", p, code)
		}
	}
	if got := r.requests(t, "none", "not_found"); got != 3 {
		t.Errorf("requests{none,not_found} = %v, want 3", got)
	}
	if got := r.requests(t, "none", "bad_request"); got != 5 {
		t.Errorf("requests{none,bad_request} = %v, want 5", got)
	}
}

// On PostgreSQL the sim reads the trade, its history and market_bars.
func TestSimPostgres(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	buy := simTrade("u1", "b1", Buy, "10", "100", simT0)
	sell := simTrade("u1", "s1", Sell, "4", "110", simT0.Add(5*time.Hour))
	for _, tr := range []Trade{buy, sell} {
		if _, err := pg.Pool.Exec(ctx, `INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, fee, ts)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, tr.ID, tr.UserID, tr.Broker, tr.ExtID, tr.Symbol,
			string(tr.Side), exactString(tr.Qty), exactString(tr.Price), exactString(tr.Fee), tr.TS); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range hourlyBars(simT0, 25, 200) {
		if _, err := pg.Pool.Exec(ctx, `INSERT INTO market_bars (symbol, granularity, ts, close) VALUES ('BTC-USD', '1h', $1, $2)`,
			b.TS, b.Close.String()); err != nil {
			t.Fatal(err)
		}
	}
	sim, err := NewSim(SimConfig{Trades: PGTrades{pg.Pool}, Stored: PGMarketBars{pg.Pool}, Vendor: &fakeBars{},
		Cache: redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(ctx, "u1", buy.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != SourceMarketBars || len(res.Curves) != 25 || fixed8(res.Delta.Decimal) != fx("456") {
		t.Fatalf("source %s points %d delta %v", res.Source, len(res.Curves), res.Delta)
	}
	for _, id := range []string{TradeID("u1", "synthetic", "none"), "nope"} {
		if _, err := sim.Run(ctx, "u1", id, 1); !errors.Is(err, ErrTradeNotFound) {
			t.Errorf("trade %s: %v, want not found", id, err)
		}
	}
}
