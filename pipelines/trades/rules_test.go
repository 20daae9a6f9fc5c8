package trades

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// testNow is 20:00 UTC: the next UTC day starts four hours later, and in
// UTC+02:00 it has already started.
var testNow = time.Date(2025, 6, 1, 20, 0, 0, 0, time.UTC)

// checkRule fails t unless err is a dead letter with reason and rule, or
// nil when rule is "".
func checkRule(t *testing.T, what string, err error, reason stages.Reason, rule string) {
	t.Helper()
	if rule == "" && reason == "" {
		if err != nil {
			t.Errorf("%s: unexpected error %v", what, err)
		}
		return
	}
	var e *stages.Error
	if !errors.As(err, &e) {
		t.Errorf("%s: error %v, want dead letter %s/%s", what, err, reason, rule)
		return
	}
	if e.Kind != stages.KindDeadLetter || e.Reason != reason || e.Rule != rule {
		t.Errorf("%s: got kind %v reason %s rule %q (%v), want %s/%q", what, e.Kind, e.Reason, e.Rule, e.Err, reason, rule)
	}
}

func sanityRule(t *testing.T, what string, err error, rule string) {
	t.Helper()
	if rule == "" {
		checkRule(t, what, err, "", "")
		return
	}
	checkRule(t, what, err, stages.ReasonSanityFail, rule)
}

func TestCheckUserID(t *testing.T) {
	cases := []struct {
		id   string
		rule string
	}{
		{"u1", ""},
		{"A", ""},
		{"a.b-c_d", ""},
		{"0" + strings.Repeat("x", 63), ""}, // 64 characters
		{"0" + strings.Repeat("x", 64), RuleUserID}, // 65
		{"", RuleUserID},
		{"alice@example.com", RuleUserID},
		{"_alice", RuleUserID},
		{".alice", RuleUserID},
		{"-alice", RuleUserID},
		{"al ice", RuleUserID},
		{"alice/..", RuleUserID},
		{"ålice", RuleUserID},
	}
	for _, c := range cases {
		sanityRule(t, fmt.Sprintf("user_id %q", c.id), CheckUserID(c.id), c.rule)
	}
}

func TestCheckKey(t *testing.T) {
	sanityRule(t, "same", CheckKey("u1", "u1"), "")
	sanityRule(t, "other user", CheckKey("u2", "u1"), RuleKey)
	sanityRule(t, "empty key", CheckKey("", "u1"), RuleKey)
	sanityRule(t, "case differs", CheckKey("U1", "u1"), RuleKey)
}

func TestCheckSince(t *testing.T) {
	cases := []struct {
		since string
		rule  string
		want  time.Time
	}{
		{"2025-06-01", "", time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)}, // today
		{"2025-05-02", "", time.Date(2025, 5, 2, 0, 0, 0, 0, time.UTC)},
		{"2025-06-01T23:59:59Z", "", time.Date(2025, 6, 1, 23, 59, 59, 0, time.UTC)},
		// 2025-06-02 01:00 in UTC+2 is 2025-06-01 23:00 UTC: still today.
		{"2025-06-02T01:00:00+02:00", "", time.Date(2025, 6, 1, 23, 0, 0, 0, time.UTC)},
		{"2025-06-02", RuleSince, time.Time{}},
		{"2025-06-02T00:00:00Z", RuleSince, time.Time{}},
		{"2025-06-01T22:30:00-02:00", RuleSince, time.Time{}}, // 2025-06-02 00:30 UTC
		{"", RuleSince, time.Time{}},
		{"01/06/2025", RuleSince, time.Time{}},
		{"2025-13-01", RuleSince, time.Time{}},
		{"2025-06-01T20:00:00", RuleSince, time.Time{}}, // no zone
	}
	for _, c := range cases {
		got, err := CheckSince(c.since, testNow)
		sanityRule(t, fmt.Sprintf("since %q", c.since), err, c.rule)
		if c.rule == "" && !got.Equal(c.want) {
			t.Errorf("since %q = %v, want %v", c.since, got, c.want)
		}
	}
}

func TestCheckBroker(t *testing.T) {
	for _, b := range []string{"coinbase", "binance", "synthetic"} {
		sanityRule(t, b, CheckBroker(b), "")
	}
	for _, b := range []string{"", "Coinbase", "BINANCE", "kraken", "synthetic "} {
		sanityRule(t, fmt.Sprintf("%q", b), CheckBroker(b), RuleBroker)
	}
	if !NeedsConnection("coinbase") || !NeedsConnection("binance") || NeedsConnection("synthetic") {
		t.Error("only coinbase and binance need a broker connection")
	}
}

func TestImportCommandValidateOrder(t *testing.T) {
	ok := ImportCommand{UserID: "u1", Since: "2025-05-01", Broker: "synthetic"}
	sanityRule(t, "valid", ok.Validate("u1", testNow), "")
	cases := []struct {
		name string
		c    ImportCommand
		key  string
		rule string
	}{
		{"user first", ImportCommand{UserID: "a@b.c", Since: "x", Broker: "x"}, "zz", RuleUserID},
		{"then key", ImportCommand{UserID: "u1", Since: "x", Broker: "x"}, "u2", RuleKey},
		{"then since", ImportCommand{UserID: "u1", Since: "2099-01-01", Broker: "x"}, "u1", RuleSince},
		{"then broker", ImportCommand{UserID: "u1", Since: "2025-05-01", Broker: "x"}, "u1", RuleBroker},
	}
	for _, c := range cases {
		sanityRule(t, c.name, c.c.Validate(c.key, testNow), c.rule)
	}
}

func pushOf(n int) json.RawMessage {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"id":"%d"}`, i)
	}
	return json.RawMessage("[" + strings.Join(items, ",") + "]")
}

func TestPushCommandValidate(t *testing.T) {
	base := PushCommand{UserID: "u1", Broker: "synthetic", PushID: "p1", Trades: pushOf(1000)}
	items, err := base.Validate("u1")
	sanityRule(t, "1000 trades", err, "")
	if len(items) != 1000 || string(items[999]) != `{"id":"999"}` {
		t.Errorf("items: %d, last %s", len(items), items[len(items)-1])
	}
	cases := []struct {
		name string
		edit func(*PushCommand)
		key  string
		rule string
	}{
		{"1001 trades", func(c *PushCommand) { c.Trades = pushOf(1001) }, "u1", RulePush},
		{"empty array", func(c *PushCommand) { c.Trades = json.RawMessage(" [] ") }, "u1", ""},
		{"trades absent", func(c *PushCommand) { c.Trades = nil }, "u1", RulePush},
		{"trades null", func(c *PushCommand) { c.Trades = json.RawMessage("null") }, "u1", RulePush},
		{"trades object", func(c *PushCommand) { c.Trades = json.RawMessage(`{"id":"1"}`) }, "u1", RulePush},
		{"trades string", func(c *PushCommand) { c.Trades = json.RawMessage(`"[]"`) }, "u1", RulePush},
		{"no push_id", func(c *PushCommand) { c.PushID = "" }, "u1", RulePush},
		{"push_id 256 bytes", func(c *PushCommand) { c.PushID = strings.Repeat("p", 256) }, "u1", ""},
		{"push_id 257 bytes", func(c *PushCommand) { c.PushID = strings.Repeat("p", 257) }, "u1", RulePush},
		{"broker before push", func(c *PushCommand) { c.Broker = "x"; c.PushID = "" }, "u1", RuleBroker},
		{"key before broker", func(c *PushCommand) { c.Broker = "x" }, "u2", RuleKey},
		{"user before key", func(c *PushCommand) { c.UserID = "" }, "u2", RuleUserID},
	}
	for _, c := range cases {
		cmd := base
		c.edit(&cmd)
		_, err := cmd.Validate(c.key)
		sanityRule(t, c.name, err, c.rule)
	}
}

func TestPageCommandValidate(t *testing.T) {
	p := PageCommand{UserID: "u1", ImportID: "i", RunID: "r", Page: 1}
	sanityRule(t, "valid", p.Validate("u1"), "")
	sanityRule(t, "key", p.Validate("u2"), RuleKey)
	p.UserID = "x@y"
	sanityRule(t, "user", p.Validate("x@y"), RuleUserID)
}

// rawTrade builds a RawTrade from field JSON texts; "-" leaves a field
// absent.
func rawTrade(id, symbol, side, qty, price, fee, ts string) RawTrade {
	f := func(s string) json.RawMessage {
		if s == "-" {
			return nil
		}
		return json.RawMessage(s)
	}
	return RawTrade{ID: f(id), Symbol: f(symbol), Side: f(side), Qty: f(qty), Price: f(price), Fee: f(fee), TS: f(ts)}
}

func TestNormalizeRules(t *testing.T) {
	at := func(d time.Duration) string { return `"` + testNow.Add(d).Format(time.RFC3339Nano) + `"` }
	good := []string{`"T-1"`, `"btc-usd"`, `"buy"`, `"0.5"`, `"100"`, `"0.1"`, `"2025-06-01T10:00:00Z"`}
	type edit struct {
		field int // index in good
		value string
	}
	cases := []struct {
		name  string
		edits []edit
		rule  string
	}{
		{"valid", nil, ""},
		{"integer id", []edit{{0, `123456789`}}, ""},
		{"negative integer id", []edit{{0, `-5`}}, ""},
		{"fractional id", []edit{{0, `1.5`}}, RuleTradeID},
		{"empty id", []edit{{0, `""`}}, RuleTradeID},
		{"absent id", []edit{{0, `-`}}, RuleTradeID},
		{"null id", []edit{{0, `null`}}, RuleTradeID},
		{"object id", []edit{{0, `{"a":1}`}}, RuleTradeID},
		{"id of 128 bytes", []edit{{0, `"` + strings.Repeat("é", 64) + `"`}}, ""},
		{"id of 129 bytes", []edit{{0, `"x` + strings.Repeat("é", 64) + `"`}}, RuleTradeID},
		{"symbol with slash", []edit{{1, `"eth/usdt"`}}, ""},
		{"symbol alone", []edit{{1, `"AAPL"`}}, ""},
		{"symbol 12+12", []edit{{1, `"ABCDEFGHIJKL-ABCDEFGHIJKL"`}}, ""},
		{"symbol 13", []edit{{1, `"ABCDEFGHIJKLM"`}}, RuleSymbol},
		{"symbol quote 13", []edit{{1, `"BTC-ABCDEFGHIJKLM"`}}, RuleSymbol},
		{"symbol underscore", []edit{{1, `"BTC_USD"`}}, RuleSymbol},
		{"symbol two separators", []edit{{1, `"A-B-C"`}}, RuleSymbol},
		{"symbol trailing dash", []edit{{1, `"BTC-"`}}, RuleSymbol},
		{"symbol empty", []edit{{1, `""`}}, RuleSymbol},
		{"symbol number", []edit{{1, `42`}}, RuleSymbol},
		{"side Sell", []edit{{2, `"Sell"`}}, ""},
		{"side sElL", []edit{{2, `"sElL"`}}, ""},
		{"side long", []edit{{2, `"long"`}}, RuleSide},
		{"side absent", []edit{{2, `-`}}, RuleSide},
		{"qty number", []edit{{3, `2`}}, ""},
		{"qty smallest", []edit{{3, `"0.00000001"`}}, ""},
		{"qty exponent", []edit{{3, `1e-3`}}, ""},
		{"qty zero", []edit{{3, `"0"`}}, RuleQty},
		{"qty 0.0", []edit{{3, `0.0`}}, RuleQty},
		{"qty negative", []edit{{3, `"-1"`}}, RuleQty},
		{"qty text", []edit{{3, `"abc"`}}, RuleQty},
		{"qty NaN", []edit{{3, `"NaN"`}}, RuleQty},
		{"qty huge exponent", []edit{{3, `"1e999"`}}, RuleQty},
		{"qty absent", []edit{{3, `-`}}, RuleQty},
		{"qty spaces", []edit{{3, `" 1"`}}, RuleQty},
		{"price zero", []edit{{4, `0`}}, RulePrice},
		{"price negative", []edit{{4, `-0.01`}}, RulePrice},
		{"price absent", []edit{{4, `-`}}, RulePrice},
		{"fee absent", []edit{{5, `-`}}, ""},
		{"fee null", []edit{{5, `null`}}, ""},
		{"fee zero", []edit{{5, `0`}}, ""},
		{"fee negative", []edit{{5, `"-0.00000001"`}}, RuleFee},
		{"fee text", []edit{{5, `"free"`}}, RuleFee},
		{"ts now+5min", []edit{{6, at(5 * time.Minute)}}, ""},
		{"ts now+5min+1ns", []edit{{6, at(5*time.Minute + time.Nanosecond)}}, RuleTS},
		{"ts with offset", []edit{{6, `"2025-06-01T12:00:00+02:00"`}}, ""},
		{"ts without zone", []edit{{6, `"2025-06-01T10:00:00"`}}, RuleTS},
		{"ts number", []edit{{6, `1748772000`}}, RuleTS},
		{"ts absent", []edit{{6, `-`}}, RuleTS},
		// First failure wins, in rule order.
		{"id before symbol", []edit{{0, `""`}, {1, `"?"`}}, RuleTradeID},
		{"symbol before side", []edit{{1, `"?"`}, {2, `"x"`}}, RuleSymbol},
		{"side before qty", []edit{{2, `"x"`}, {3, `0`}}, RuleSide},
		{"qty before price", []edit{{3, `0`}, {4, `0`}}, RuleQty},
		{"price before fee", []edit{{4, `0`}, {5, `-1`}}, RulePrice},
		{"fee before ts", []edit{{5, `-1`}, {6, `"x"`}}, RuleFee},
	}
	for _, c := range cases {
		f := append([]string(nil), good...)
		for _, e := range c.edits {
			f[e.field] = e.value
		}
		tr, err := rawTrade(f[0], f[1], f[2], f[3], f[4], f[5], f[6]).Normalize("u1", "coinbase", testNow)
		sanityRule(t, c.name, err, c.rule)
		if c.rule != "" {
			continue
		}
		if tr.UserID != "u1" || tr.Broker != "coinbase" || tr.ID != TradeID("u1", "coinbase", tr.ExtID) {
			t.Errorf("%s: identity %+v", c.name, tr)
		}
		if tr.Symbol != strings.ToUpper(tr.Symbol) || (tr.Side != Buy && tr.Side != Sell) || tr.TS.Location() != time.UTC {
			t.Errorf("%s: not normalised: %+v", c.name, tr)
		}
	}
}

func TestNormalizeValues(t *testing.T) {
	tr, err := rawTrade(`42`, `"eth/usdt"`, `"Sell"`, `"1.50"`, `2500.125`, `-`, `"2025-06-01T12:00:00.5+02:00"`).
		Normalize("u1", "binance", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if tr.ExtID != "42" || tr.Symbol != "ETH/USDT" || tr.Side != Sell {
		t.Errorf("identity: %+v", tr)
	}
	if tr.Qty.String() != "1.5" || tr.Price.String() != "2500.125" || !tr.Fee.IsZero() {
		t.Errorf("numbers: qty %s price %s fee %s", tr.Qty, tr.Price, tr.Fee)
	}
	if want := time.Date(2025, 6, 1, 10, 0, 0, 5e8, time.UTC); !tr.TS.Equal(want) || tr.TS.Location() != time.UTC {
		t.Errorf("ts %v, want %v UTC", tr.TS, want)
	}
}

func TestDecodeTradeScoredRule(t *testing.T) {
	full := map[string]any{
		"trade_id": "t1", "side": "SELL", "ts": "2025-01-06T10:00:00Z", "realized_pnl": "1.00000000",
		"symbol": "BTC-USD", "qty": "1", "price": "2", "fee": "0", "labels": []string{"overtrading"},
	}
	cases := []struct {
		name string
		drop string
		set  map[string]any
		rule string
	}{
		{"complete", "", nil, ""},
		{"no trade_id", "trade_id", nil, RuleScored},
		{"empty trade_id", "", map[string]any{"trade_id": ""}, RuleScored},
		{"no ts", "ts", nil, RuleScored},
		{"bad ts", "", map[string]any{"ts": "yesterday"}, RuleScored},
		{"no side", "side", nil, RuleScored},
		{"side hold", "", map[string]any{"side": "HOLD"}, RuleScored},
		{"no realized_pnl", "realized_pnl", nil, RuleScored},
		{"null realized_pnl", "", map[string]any{"realized_pnl": nil}, RuleScored},
		{"realized_pnl as a number", "", map[string]any{"realized_pnl": -1.5}, ""},
		{"bad realized_pnl", "", map[string]any{"realized_pnl": "lots"}, RuleScored},
		{"trade_id a number", "", map[string]any{"trade_id": 7}, RuleScored},
	}
	for _, c := range cases {
		p := map[string]any{}
		for k, v := range full {
			if k != c.drop {
				p[k] = v
			}
		}
		for k, v := range c.set {
			p[k] = v
		}
		b, _ := json.Marshal(p)
		s, err := DecodeTradeScored(b)
		sanityRule(t, c.name, err, c.rule)
		if c.rule == "" && (s.TradeID == "" || s.RealizedPnL == nil || len(s.Labels) != 1) {
			t.Errorf("%s: decoded %+v", c.name, s)
		}
	}
	_, err := DecodeTradeScored(json.RawMessage(`[1]`))
	sanityRule(t, "not an object", err, RuleScored)
	_, err = DecodeTradeScored(json.RawMessage(`{"trade_id":"t","side":"BUY","ts":"2025-01-06T10:00:00Z","realized_pnl":"0","qty":true}`))
	checkRule(t, "other field malformed", err, stages.ReasonDecodeError, "")
}

func TestCheckWindowOpen(t *testing.T) {
	w := WeekOf(time.Date(2025, 1, 8, 0, 0, 0, 0, time.UTC)) // 2025-01-06 .. 2025-01-13
	horizon := 8 * 7 * 24 * time.Hour
	sanityRule(t, "just before the horizon", CheckWindowOpen(w, w.End.Add(horizon-time.Nanosecond), horizon), "")
	sanityRule(t, "at the horizon", CheckWindowOpen(w, w.End.Add(horizon), horizon), RuleDigestWindowExpired)
	sanityRule(t, "current window", CheckWindowOpen(w, w.Start, horizon), "")
}
