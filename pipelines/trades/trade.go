package trades

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Side is BUY or SELL.
type Side string

// Sides.
const (
	Buy  Side = "BUY"
	Sell Side = "SELL"
)

// RawTrade is one trade as a broker adapter returns it and as a push
// carries it: {id, symbol, side, qty, price, fee?, ts}. Each field keeps its
// JSON text, so numbers may be JSON numbers or decimal strings and a trade
// that fails a rule is dead-lettered exactly as it came. A nil field is
// absent (fee is optional).
type RawTrade struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Symbol json.RawMessage `json:"symbol,omitempty"`
	Side   json.RawMessage `json:"side,omitempty"`
	Qty    json.RawMessage `json:"qty,omitempty"`
	Price  json.RawMessage `json:"price,omitempty"`
	Fee    json.RawMessage `json:"fee,omitempty"`
	TS     json.RawMessage `json:"ts,omitempty"`
}

// Trade is a normalised trade, the row of the trades table. Trades are
// values; their decimals are exact.
type Trade struct {
	ID     string // TradeID(UserID, Broker, ExtID)
	UserID string
	Broker string
	ExtID  string
	Symbol string // upper case
	Side   Side
	Qty    decimal.Decimal // > 0
	Price  decimal.Decimal // > 0
	Fee    decimal.Decimal // >= 0; 0 when the broker gave none
	TS     time.Time       // UTC
}

// Notional is qty × price.
func (t Trade) Notional() decimal.Decimal { return t.Qty.Mul(t.Price) }

// ContentHash is the hex SHA-256 of the trade's canonical content
// ("symbol|side|qty|price|fee|ts", decimals in canonical text, ts in UTC
// RFC 3339 with its fractional seconds): equal for every delivery of the
// same version of a trade.
func (t Trade) ContentHash() string {
	return sha256Hex(strings.Join([]string{
		t.Symbol, string(t.Side), exactString(t.Qty), exactString(t.Price), exactString(t.Fee),
		t.TS.UTC().Format(time.RFC3339Nano),
	}, "|"))
}

var integerText = regexp.MustCompile(`^-?[0-9]+$`)

// Normalize validates a raw trade of userID at broker against the
// per-trade rules, in order, the first failure winning: trades.trade_id
// (a non-empty string or an integer of at most MaxExtIDBytes bytes),
// trades.symbol (upper-cased, then
// ^[A-Z0-9]{1,12}([-/][A-Z0-9]{1,12})?$), trades.side (BUY or SELL in any
// case), trades.qty (> 0), trades.price (> 0), trades.fee (absent or null is
// 0, else >= 0), trades.ts (RFC 3339, at most FutureSkew after now). Numbers
// are JSON numbers or decimal strings (ParseDecimal). The error is a
// sanity_fail dead letter naming the rule.
func (r RawTrade) Normalize(userID, broker string, now time.Time) (Trade, error) {
	t := Trade{UserID: userID, Broker: broker}

	extID, ok := jsonString(r.ID)
	if !ok && integerText.Match(bytes.TrimSpace(r.ID)) {
		extID, ok = string(bytes.TrimSpace(r.ID)), true
	}
	switch {
	case !ok || extID == "":
		return Trade{}, sanity(RuleTradeID, "trade id is missing or not a string or integer")
	case len(extID) > MaxExtIDBytes:
		return Trade{}, sanity(RuleTradeID, "trade id is %d bytes, more than %d", len(extID), MaxExtIDBytes)
	}
	t.ExtID = extID
	t.ID = TradeID(userID, broker, extID)

	symbol, _ := jsonString(r.Symbol)
	t.Symbol = strings.ToUpper(symbol)
	if !symbolPattern.MatchString(t.Symbol) {
		return Trade{}, sanity(RuleSymbol, "trade %s: symbol %q does not match %s", clip(extID), clip(symbol), symbolPattern)
	}

	side, _ := jsonString(r.Side)
	switch Side(strings.ToUpper(side)) {
	case Buy:
		t.Side = Buy
	case Sell:
		t.Side = Sell
	default:
		return Trade{}, sanity(RuleSide, "trade %s: side %q is not BUY or SELL", clip(extID), clip(side))
	}

	var err error
	if t.Qty, err = positive(r.Qty); err != nil {
		return Trade{}, sanity(RuleQty, "trade %s: qty: %w", clip(extID), err)
	}
	if t.Price, err = positive(r.Price); err != nil {
		return Trade{}, sanity(RulePrice, "trade %s: price: %w", clip(extID), err)
	}
	if t.Fee, err = fee(r.Fee); err != nil {
		return Trade{}, sanity(RuleFee, "trade %s: fee: %w", clip(extID), err)
	}

	ts, _ := jsonString(r.TS)
	at, perr := time.Parse(time.RFC3339Nano, ts)
	switch {
	case perr != nil:
		return Trade{}, sanity(RuleTS, "trade %s: ts %q is not an RFC 3339 time", clip(extID), clip(ts))
	case at.After(now.Add(FutureSkew)):
		return Trade{}, sanity(RuleTS, "trade %s: ts %s is more than %s after now (%s)",
			clip(extID), ts, FutureSkew, now.UTC().Format(time.RFC3339))
	}
	t.TS = at.UTC()
	return t, nil
}

// jsonString returns the string a JSON string value holds; ok is false for
// anything else (absent, null, number, object …).
func jsonString(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

func positive(raw json.RawMessage) (decimal.Decimal, error) {
	if isAbsent(raw) {
		return decimal.Decimal{}, errMissing
	}
	d, err := ParseDecimal(raw)
	if err != nil {
		return decimal.Decimal{}, err
	}
	if d.Sign() <= 0 {
		return decimal.Decimal{}, fmt.Errorf("%s is not > 0", exactString(d))
	}
	return d, nil
}

func fee(raw json.RawMessage) (decimal.Decimal, error) {
	if isAbsent(raw) {
		return decimal.Zero, nil
	}
	d, err := ParseDecimal(raw)
	if err != nil {
		return decimal.Decimal{}, err
	}
	if d.Sign() < 0 {
		return decimal.Decimal{}, fmt.Errorf("%s is negative", exactString(d))
	}
	return d, nil
}

func isAbsent(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

var errMissing = errors.New("missing")
