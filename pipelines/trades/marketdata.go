package trades

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/sluicehq/sluice/stages/ratelimit"
)

// Bar is one 1 h OHLCV bar as the sim uses it: its open time and its close.
type Bar struct {
	TS    time.Time
	Close decimal.Decimal
}

// BarSource returns the 1 h bars of symbol with from <= ts <= to, in any
// order. Implementations are safe for concurrent use.
type BarSource interface {
	Bars(ctx context.Context, symbol string, from, to time.Time) ([]Bar, error)
}

// Names of the bar sources, the last part of the sim's cache key.
const (
	SourceMarketBars = "market_bars" // the market_bars table
	SourceMarketData = "marketdata"  // the synthetic vendor, behind the rate limiter
)

// ErrVendorRateLimited is wrapped by a vendor's error when it answered 429
// (or the rate limiter denied the call): the sim retries it, then answers
// partial.
var ErrVendorRateLimited = errors.New("market data vendor: rate limited (429)")

// SyntheticMarketData is the deterministic market-data vendor: the close of
// the bar of symbol at hour h is a function of (symbol, h) alone, a base
// price between 10 and 1 000 (from the symbol) moved by −10 % … +10 % (from
// the hour), with 8 fractional digits at most. It has bars only for whole
// hours up to Now (a vendor has no future). Safe for concurrent use.
type SyntheticMarketData struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Bars implements BarSource.
func (s SyntheticMarketData) Bars(_ context.Context, symbol string, from, to time.Time) ([]Bar, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	if n := now(); to.After(n) {
		to = n
	}
	var bars []Bar
	for h := ceilHour(from); !h.After(to); h = h.Add(time.Hour) {
		bars = append(bars, Bar{TS: h, Close: SyntheticClose(symbol, h)})
	}
	return bars, nil
}

// SyntheticClose is the close of the synthetic vendor's bar of symbol at
// hour h.
func SyntheticClose(symbol string, h time.Time) decimal.Decimal {
	base := int64(10 + hash64(symbol)%991)                               // 10 … 1000
	move := int64(hash64(fmt.Sprint(symbol, "|", h.Unix()))%2001) - 1000 // −1000 … 1000
	// base × (1 + move / 10 000): exact, at most 4 fractional digits.
	return decimal.NewFromInt(base).Mul(decimal.NewFromInt(10_000 + move)).Shift(-4)
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// ceilHour is t rounded up to a whole hour (UTC).
func ceilHour(t time.Time) time.Time {
	h := t.UTC().Truncate(time.Hour)
	if h.Before(t) {
		h = h.Add(time.Hour)
	}
	return h
}

// Allower grants or denies one call of account; *ratelimit.Limiter is one.
type Allower interface {
	Allow(ctx context.Context, account string) (ratelimit.Decision, error)
}

// LimitedVendor puts a vendor behind a rate limiter (source marketdata,
// account = the symbol): a denied call is not made and fails with
// ErrVendorRateLimited, as the vendor's own 429 would. Safe for concurrent
// use when its parts are.
type LimitedVendor struct {
	Limiter Allower
	Vendor  BarSource
}

// Bars implements BarSource.
func (v LimitedVendor) Bars(ctx context.Context, symbol string, from, to time.Time) ([]Bar, error) {
	d, err := v.Limiter.Allow(ctx, symbol)
	if err != nil {
		return nil, fmt.Errorf("market data %s: rate limiter: %w", symbol, err)
	}
	if !d.Allowed {
		return nil, fmt.Errorf("market data %s: retry in %s: %w", symbol, d.Wait, ErrVendorRateLimited)
	}
	return v.Vendor.Bars(ctx, symbol, from, to)
}

// Querier is the part of a pgx pool or connection the stores use.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// PGMarketBars reads the 1 h bars of the market_bars table.
type PGMarketBars struct{ DB Querier }

// Bars implements BarSource.
func (p PGMarketBars) Bars(ctx context.Context, symbol string, from, to time.Time) ([]Bar, error) {
	rows, err := p.DB.Query(ctx, `SELECT ts, close::text FROM market_bars
		WHERE symbol = $1 AND granularity = '1h' AND ts >= $2 AND ts <= $3 ORDER BY ts`, symbol, from, to)
	if err != nil {
		return nil, fmt.Errorf("read market_bars of %s: %w", symbol, err)
	}
	var bars []Bar
	var ts time.Time
	var closeText string
	_, err = pgx.ForEachRow(rows, []any{&ts, &closeText}, func() error {
		c, err := decimal.NewFromString(closeText)
		if err != nil {
			return fmt.Errorf("close %q: %w", closeText, err)
		}
		bars = append(bars, Bar{TS: ts.UTC(), Close: c})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read market_bars of %s: %w", symbol, err)
	}
	return bars, nil
}

// ErrTradeNotFound is wrapped by a TradeStore's error for an unknown
// trade.
var ErrTradeNotFound = errors.New("trade not found")

// TradeStore reads stored trades. Implementations are safe for concurrent
// use.
type TradeStore interface {
	// Trade returns the trade id of userID, or an error wrapping
	// ErrTradeNotFound.
	Trade(ctx context.Context, userID, id string) (Trade, error)
	// SymbolHistory returns userID's trades in symbol with ts <= until,
	// in any order.
	SymbolHistory(ctx context.Context, userID, symbol string, until time.Time) ([]Trade, error)
}

// PGTrades is the TradeStore on the trades table.
type PGTrades struct{ DB Querier }

const tradeColumns = `id::text, user_id, broker, ext_id, symbol, side, qty::text, price::text, fee::text, ts`

// Trade implements TradeStore; an id that is not a UUID is not found.
func (p PGTrades) Trade(ctx context.Context, userID, id string) (Trade, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Trade{}, fmt.Errorf("trade %q of %s: %w", clip(id), userID, ErrTradeNotFound)
	}
	got, err := p.query(ctx, `SELECT `+tradeColumns+` FROM trades WHERE user_id = $1 AND id = $2`, userID, id)
	if err != nil {
		return Trade{}, fmt.Errorf("trade %s of %s: %w", id, userID, err)
	}
	if len(got) == 0 {
		return Trade{}, fmt.Errorf("trade %s of %s: %w", id, userID, ErrTradeNotFound)
	}
	return got[0], nil
}

// SymbolHistory implements TradeStore.
func (p PGTrades) SymbolHistory(ctx context.Context, userID, symbol string, until time.Time) ([]Trade, error) {
	got, err := p.query(ctx, `SELECT `+tradeColumns+` FROM trades WHERE user_id = $1 AND symbol = $2 AND ts <= $3`,
		userID, symbol, until)
	if err != nil {
		return nil, fmt.Errorf("trades of %s in %s: %w", userID, symbol, err)
	}
	return got, nil
}

func (p PGTrades) query(ctx context.Context, sql string, args ...any) ([]Trade, error) {
	rows, err := p.DB.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	var out []Trade
	var t Trade
	var side, qty, price, fee string
	_, err = pgx.ForEachRow(rows, []any{&t.ID, &t.UserID, &t.Broker, &t.ExtID, &t.Symbol, &side, &qty, &price, &fee, &t.TS},
		func() error {
			t.Side = Side(side)
			var err error
			if t.Qty, err = decimal.NewFromString(qty); err != nil {
				return fmt.Errorf("qty %q: %w", qty, err)
			}
			if t.Price, err = decimal.NewFromString(price); err != nil {
				return fmt.Errorf("price %q: %w", price, err)
			}
			if t.Fee, err = decimal.NewFromString(fee); err != nil {
				return fmt.Errorf("fee %q: %w", fee, err)
			}
			t.TS = t.TS.UTC()
			out = append(out, t)
			return nil
		})
	return out, err
}

// sortBars sorts bars by ts and keeps the first of equal times.
func sortBars(bars []Bar) []Bar {
	bars = slices.Clone(bars)
	slices.SortStableFunc(bars, func(a, b Bar) int { return a.TS.Compare(b.TS) })
	return slices.CompactFunc(bars, func(a, b Bar) bool { return a.TS.Equal(b.TS) })
}
