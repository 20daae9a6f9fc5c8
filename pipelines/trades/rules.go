package trades

import (
	"fmt"
	"regexp"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// Rule ids (fixed), the value of dlq.rule. Those of the first group are
// checked here without I/O and dead-letter with reason sanity_fail; the
// others name failures found by the services.
const (
	RuleUserID  = "trades.user_id"
	RuleKey     = "trades.key"
	RuleSince   = "trades.since"
	RuleBroker  = "trades.broker"
	RulePush    = "trades.push"
	RuleTradeID = "trades.trade_id"
	RuleSymbol  = "trades.symbol"
	RuleSide    = "trades.side"
	RuleQty     = "trades.qty"
	RulePrice   = "trades.price"
	RuleFee     = "trades.fee"
	RuleTS      = "trades.ts"
	RuleScored  = "trades.scored"
	// RuleDigestWindowExpired: a trade.scored for a window past the digest
	// horizon (see CheckWindowOpen).
	RuleDigestWindowExpired = "trades.digest_window_expired"

	// RuleBrokerConnection (sanity_fail): a coinbase or binance import
	// without an active broker_connections row.
	RuleBrokerConnection = "trades.broker_connection"
	// RuleBrokerAuth (sanity_fail): the broker answered 401 or 403.
	RuleBrokerAuth = "trades.broker_auth"
	// RuleBrokerFetch, RuleAI, RuleMarketData (retries_exhausted): the
	// broker, the AI coach or the market data source kept failing.
	RuleBrokerFetch = "trades.broker_fetch"
	RuleAI          = "trades.ai"
	RuleMarketData  = "trades.marketdata"
)

// Brokers.
const (
	BrokerCoinbase  = "coinbase"
	BrokerBinance   = "binance"
	BrokerSynthetic = "synthetic"
)

// Limits of the rules.
const (
	// MaxPushTrades is the most trades one push may carry.
	MaxPushTrades = 1000
	// MaxExtIDBytes is the longest broker trade id, in bytes.
	MaxExtIDBytes = 128
	// MaxPushIDBytes is the longest push_id, in bytes (a choice: it is
	// hashed into the import id and must stay printable in logs).
	MaxPushIDBytes = 256
	// FutureSkew is how far after now a trade's ts may be.
	FutureSkew = 5 * time.Minute
)

var (
	userIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	symbolPattern = regexp.MustCompile(`^[A-Z0-9]{1,12}([-/][A-Z0-9]{1,12})?$`)
)

// sanity returns the dead-letter error of a failed rule.
func sanity(rule string, format string, args ...any) error {
	return stages.DeadLetter(stages.ReasonSanityFail, rule, fmt.Errorf(format, args...))
}

// CheckUserID applies trades.user_id: present and matching
// ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$, which refuses e-mail addresses (user
// ids appear in object keys).
func CheckUserID(userID string) error {
	if userID == "" {
		return sanity(RuleUserID, "user_id is missing")
	}
	if !userIDPattern.MatchString(userID) {
		return sanity(RuleUserID, "user_id %q does not match %s", clip(userID), userIDPattern)
	}
	return nil
}

// CheckKey applies trades.key: the record key is the user id.
func CheckKey(key, userID string) error {
	if key != userID {
		return sanity(RuleKey, "record key %q is not the user_id %q", clip(key), clip(userID))
	}
	return nil
}

// ParseSince parses a since value: a date YYYY-MM-DD (midnight UTC) or an
// RFC 3339 time.
func ParseSince(since string) (time.Time, error) {
	if t, err := time.Parse(time.DateOnly, since); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.RFC3339Nano, since)
	if err != nil {
		return time.Time{}, fmt.Errorf("since %q is not a date (YYYY-MM-DD) or an RFC 3339 time", clip(since))
	}
	return t, nil
}

// CheckSince applies trades.since: since parses (ParseSince) and its UTC
// date is not after now's UTC date. It returns the parsed time.
func CheckSince(since string, now time.Time) (time.Time, error) {
	t, err := ParseSince(since)
	if err != nil {
		return time.Time{}, stages.DeadLetter(stages.ReasonSanityFail, RuleSince, err)
	}
	if utcDate(t).After(utcDate(now)) {
		return time.Time{}, sanity(RuleSince, "since %s is after today (%s UTC)", since, now.UTC().Format(time.DateOnly))
	}
	return t, nil
}

func utcDate(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// CheckBroker applies trades.broker: coinbase, binance or synthetic
// (lower case).
func CheckBroker(broker string) error {
	switch broker {
	case BrokerCoinbase, BrokerBinance, BrokerSynthetic:
		return nil
	case "":
		return sanity(RuleBroker, "broker is missing")
	}
	return sanity(RuleBroker, "broker %q is not coinbase, binance or synthetic", clip(broker))
}

// NeedsConnection reports whether imports from broker need an active
// broker_connections row (rule trades.broker_connection).
func NeedsConnection(broker string) bool {
	return broker == BrokerCoinbase || broker == BrokerBinance
}

// CheckScoredFields applies trades.scored to a decoded trade.scored
// payload: it has trade_id, ts, side (BUY or SELL) and realized_pnl.
func CheckScoredFields(s TradeScored) error {
	switch {
	case s.TradeID == "":
		return sanity(RuleScored, "trade.scored lacks trade_id")
	case s.TS.IsZero():
		return sanity(RuleScored, "trade.scored %s lacks ts", s.TradeID)
	case s.Side != Buy && s.Side != Sell:
		return sanity(RuleScored, "trade.scored %s lacks side (BUY or SELL)", s.TradeID)
	case s.RealizedPnL == nil:
		return sanity(RuleScored, "trade.scored %s lacks realized_pnl", s.TradeID)
	}
	return nil
}

// CheckWindowOpen applies trades.digest_window_expired: a contribution to
// window w is refused once now is horizon or more past w's end (its state
// has been or is being tombstoned).
func CheckWindowOpen(w Window, now time.Time, horizon time.Duration) error {
	if !now.Before(w.End.Add(horizon)) {
		return sanity(RuleDigestWindowExpired, "window %s..%s ended more than %s ago", w.StartDate(), w.EndDate(), horizon)
	}
	return nil
}
