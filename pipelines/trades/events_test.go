package trades

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/sluicehq/sluice/stages"
)

func TestDecodeEventClassification(t *testing.T) {
	cases := []struct {
		name   string
		value  string
		reason stages.Reason
	}{
		{"not JSON", `{`, stages.ReasonDecodeError},
		{"not UTF-8", "{\"type\":\"trade.scored\",\"event_id\":\"\xfe\"}", stages.ReasonDecodeError},
		{"not an object", `"trade.scored"`, stages.ReasonDecodeError},
		{"timestamp malformed", `{"type":"score.request","timestamp":"now"}`, stages.ReasonDecodeError},
		{"type missing", `{"event_id":"e","payload":{}}`, stages.ReasonUnknownTaskType},
		{"type unknown", `{"type":"trade.deleted","payload":{}}`, stages.ReasonUnknownTaskType},
	}
	for _, c := range cases {
		_, err := DecodeEvent([]byte(c.value))
		checkRule(t, c.name, err, c.reason, "")
	}
	for _, typ := range []string{
		TypeTradeUpserted, TypeImportProgress, TypeImportCompleted, TypeImportFailed, TypeScoreRequest,
		TypeTradeScored, TypeDigestRequest, TypeCoachReflect, TypeDigestReady,
	} {
		e, err := DecodeEvent([]byte(`{"event_id":"e1","type":"` + typ + `","timestamp":"2025-01-06T00:00:00Z","payload":{"x":1}}`))
		if err != nil || e.Type != typ || e.EventID != "e1" || string(e.Payload) != `{"x":1}` {
			t.Errorf("%s: %+v, %v", typ, e, err)
		}
	}
	e, _ := DecodeEvent([]byte(`{"type":"import.progress","payload":{"page":"two"}}`))
	_, err := DecodePayload[ImportProgress](e)
	checkRule(t, "payload mismatch", err, stages.ReasonDecodeError, "")
}

// The wire names of the payloads are the contract consumers read.
func TestEventWireFields(t *testing.T) {
	keys := func(v any) []string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	cases := []struct {
		v    any
		want []string
	}{
		{ImportProgress{}, []string{"fetched", "import_id", "page", "percent", "rejected", "run_id", "stored"}},
		{ImportCompleted{}, []string{"fetched", "import_id", "pages", "rejected", "run_id", "since", "stored", "user_id"}},
		{ImportFailed{}, []string{"import_id", "reason", "rule", "run_id"}},
		{ScoreRequest{}, []string{"since", "user_id"}},
		{DigestRequest{}, []string{"period_start", "user_id"}},
		{CoachReflect{}, []string{"insight", "labels", "sparkline", "tone", "trade_id"}},
		{DigestReady{}, []string{"digest_id", "object_key", "partial", "period", "revision", "user_id"}},
		{Event[ScoreRequest]{}, []string{"event_id", "payload", "timestamp", "type"}},
		{TradeScored{}, []string{"broker", "ext_id", "fee", "labels", "lot_labels", "lots", "price", "qty",
			"realized_pnl", "side", "symbol", "trade_id", "ts", "user_id"}},
		{LotPnL{}, []string{"labels", "pnl", "qty"}},
		{DigestObject{}, []string{"agg", "partial", "period", "revision", "user_id"}},
		{Agg{}, []string{"biased_trade_share", "counts_by_label", "fees", "notional", "pnl_by_label", "realized_pnl",
			"sells", "buys", "streaks", "top_insight", "trades"}},
	}
	for _, c := range cases {
		want := slices.Clone(c.want)
		slices.Sort(want)
		if got := keys(c.v); !slices.Equal(got, want) {
			t.Errorf("%T fields %v, want %v", c.v, got, want)
		}
	}
}

func TestTradeUpsertedEvent(t *testing.T) {
	tr, err := rawTrade(`"T-1"`, `"btc-usd"`, `"buy"`, `"0.50"`, `100`, `-`, `"2025-06-01T10:00:00Z"`).Normalize("u1", "coinbase", testNow)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 6, 1, 20, 0, 0, 0, time.FixedZone("X", 7200))
	b, err := json.Marshal(NewTradeUpserted(tr, "imp1", at))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	p := got["payload"].(map[string]any)
	if got["type"] != TypeTradeUpserted || got["event_id"] != TradeUpsertedEventID(tr) || got["timestamp"] != "2025-06-01T18:00:00Z" {
		t.Errorf("envelope %s", b)
	}
	if p["qty"] != "0.5" || p["price"] != "100" || p["fee"] != "0" || p["symbol"] != "BTC-USD" || p["side"] != "BUY" ||
		p["trade_id"] != tr.ID || p["import_id"] != "imp1" || p["ext_id"] != "T-1" || p["ts"] != "2025-06-01T10:00:00Z" {
		t.Errorf("payload %s", b)
	}
}

func TestTradeScoredRoundTrip(t *testing.T) {
	r := Fixed8{decimal.RequireFromString("-1.234567895")}
	in := TradeScored{
		TradeFields: TradeFields{
			TradeID: "t1", UserID: "u1", Broker: "coinbase", ExtID: "x", Symbol: "BTC-USD", Side: Sell,
			Qty: Exact{decimal.RequireFromString("2")}, Price: Exact{decimal.RequireFromString("10.5")},
			Fee: Exact{decimal.RequireFromString("0.1")}, TS: time.Date(2025, 1, 6, 10, 0, 0, 0, time.UTC),
		},
		RealizedPnL: &r, LotLabels: []string{"overtrading"}, Labels: []string{},
		Lots: []LotPnL{{Qty: Exact{decimal.RequireFromString("2")}, PnL: r, Labels: []string{"overtrading"}}},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeTradeScored(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.RealizedPnL.String() != "-1.2345679" { // read back as written: rounded half-even
		t.Errorf("realized %s from %s", out.RealizedPnL, b)
	}
	again, _ := json.Marshal(out)
	if string(again) != string(b) {
		t.Errorf("round trip:\n%s\n%s", b, again)
	}
	if !reflect.DeepEqual(out.LotLabels, in.LotLabels) || out.Lots[0].PnL.String() != "-1.2345679" {
		t.Errorf("lots %+v", out.Lots)
	}
}
