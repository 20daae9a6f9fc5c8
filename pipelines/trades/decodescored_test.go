package trades

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/sluicehq/sluice/stages"
)

// scoredValues returns the trade.scored records trades-score writes for a
// random history of n trades of user u (as the benchmark's corpus makes
// them: Score, then the event JSON).
func scoredValues(t testing.TB, rng *rand.Rand, u string, n int) [][]byte {
	t.Helper()
	w, _ := ParseISOWeek("2025-W02")
	var hist []Trade
	for i := range n {
		side := []Side{Buy, Buy, Sell}[rng.IntN(3)]
		ts := w.Start.Add(time.Duration(rng.IntN(7*24*3600)) * time.Second)
		if rng.IntN(10) == 0 {
			ts = ts.Add(time.Duration(rng.IntN(1e9))) // a sub-second part
		}
		ext := fmt.Sprintf("x%04d", i)
		broker := []string{"synthetic", "coinbase", "binance"}[rng.IntN(3)]
		hist = append(hist, Trade{
			ID: TradeID(u, broker, ext), UserID: u, Broker: broker, ExtID: ext,
			Symbol: []string{"BTC-USD", "ETH-USD"}[rng.IntN(2)], Side: side,
			Qty:   decimal.New(rng.Int64N(2_000_000)+1, -int32(rng.IntN(6))),
			Price: decimal.New(rng.Int64N(10_000_000)+1, -2),
			Fee:   decimal.New(rng.Int64N(100_000), -4), TS: ts,
		})
	}
	var out [][]byte
	for _, s := range Score(hist, time.Time{}) {
		p := s.Payload()
		body, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		v, err := json.Marshal(Event[TradeScored]{
			EventID: TradeScoredEventID(p.TradeID, body), Type: TypeTradeScored, Timestamp: p.TS.Add(time.Minute), Payload: p,
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// sameDecoding fails t unless decodeDigestIn decodes value exactly as
// decodeDigestInJSON does: the same digestIn (strings, times, decimals'
// coefficients and exponents, nil and empty slices), or a dead letter of
// the same kind, reason, rule and text. It returns whether the one-pass
// decoder handled value.
func sameDecoding(t testing.TB, what string, value []byte) bool {
	t.Helper()
	_, fast := decodeScoredFast(value)
	got, gerr := decodeDigestIn([]byte("k"), value)
	want, werr := decodeDigestInJSON([]byte("k"), value)
	if fast && werr != nil {
		t.Fatalf("%s: the one-pass decoder accepted %q, which the JSON decoder refuses: %v", what, value, werr)
	}
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("%s: error %v, want %v (value %q)", what, gerr, werr, value)
	}
	if werr != nil {
		var ge, we *stages.Error
		if errors.As(gerr, &ge) != errors.As(werr, &we) {
			t.Fatalf("%s: error %v, want %v", what, gerr, werr)
		}
		if ge != nil && (ge.Kind != we.Kind || ge.Reason != we.Reason || ge.Rule != we.Rule) {
			t.Fatalf("%s: dead letter %v/%s/%q, want %v/%s/%q", what, ge.Kind, ge.Reason, ge.Rule, we.Kind, we.Reason, we.Rule)
		}
		if gerr.Error() != werr.Error() && !jsonErrorText(value, gerr.Error()) {
			t.Fatalf("%s: error %q, want %q", what, gerr, werr)
		}
		return fast
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: decoded\n %+v\nwant\n %+v\n(value %q)", what, got.scored, want.scored, value)
	}
	if got.scored != nil {
		checkExactDecimals(t, what, *got.scored, *want.scored)
	}
	return fast
}

// jsonErrorText reports whether decodeDigestInJSON gives value's error
// text text in one of a few tries: when several of trade_id, ts, side and
// realized_pnl are malformed, DecodeTradeScored reports the first it
// probes, in map order.
func jsonErrorText(value []byte, text string) bool {
	for range 50 {
		if _, err := decodeDigestInJSON([]byte("k"), value); err != nil && err.Error() == text {
			return true
		}
	}
	return false
}

// checkExactDecimals compares the decimals of two payloads by coefficient
// and exponent (reflect.DeepEqual already does; this says which differs).
func checkExactDecimals(t testing.TB, what string, got, want TradeScored) {
	t.Helper()
	same := func(name string, a, b decimal.Decimal) {
		if a.Exponent() != b.Exponent() || a.Coefficient().Cmp(b.Coefficient()) != 0 {
			t.Fatalf("%s: %s %s (exp %d), want %s (exp %d)", what, name, a, a.Exponent(), b, b.Exponent())
		}
	}
	same("qty", got.Qty.Decimal, want.Qty.Decimal)
	same("price", got.Price.Decimal, want.Price.Decimal)
	same("fee", got.Fee.Decimal, want.Fee.Decimal)
	same("realized_pnl", got.RealizedPnL.Decimal, want.RealizedPnL.Decimal)
	for i := range got.Lots {
		same("lot qty", got.Lots[i].Qty.Decimal, want.Lots[i].Qty.Decimal)
		same("lot pnl", got.Lots[i].PnL.Decimal, want.Lots[i].PnL.Decimal)
	}
}

// Every record trades-score writes takes the one-pass path and decodes to
// what the JSON decoder gives.
func TestDecodeScoredFastCorpus(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 1))
	n, sells, lots := 0, 0, 0
	for u := range 20 {
		for _, v := range scoredValues(t, rng, fmt.Sprintf("u%02d", u), 60) {
			if !sameDecoding(t, "corpus", v) {
				t.Fatalf("the one-pass decoder did not handle a record trades-score writes: %s", v)
			}
			in, _ := decodeDigestIn(nil, v)
			if in.scored.Side == Sell {
				sells++
				lots += len(in.scored.Lots)
			}
			n++
		}
	}
	if sells == 0 || lots == 0 {
		t.Fatalf("the corpus has %d SELLs and %d lots: it does not exercise them", sells, lots)
	}
	t.Logf("%d records, %d SELLs, %d lots", n, sells, lots)
}

// canonicalScored is one record as trades-score writes it, to mutate.
const canonicalScored = `{"event_id":"ts-1","type":"trade.scored","timestamp":"2025-01-06T10:01:00Z","payload":` +
	`{"trade_id":"3f8e2b1c-0d4a-5e6f-8a9b-0c1d2e3f4a5b","user_id":"u1","broker":"synthetic","ext_id":"x0001","symbol":"BTC-USD",` +
	`"side":"SELL","qty":"0.5","price":"101.25","fee":"0.0506","ts":"2025-01-06T10:00:00Z","realized_pnl":"-1.25000000",` +
	`"lot_labels":["overtrading"],"labels":["revenge_trading"],` +
	`"lots":[{"qty":"0.5","pnl":"-1.25000000","labels":["overtrading","revenge_trading"]}]}}`

// Every malformed or unusual input decodes (to a value or a dead letter
// with its reason, rule and text) exactly as the JSON decoder decodes it;
// the handled column pins which inputs the one-pass decoder takes.
func TestDecodeScoredFastTable(t *testing.T) {
	rep := func(old, new string) string {
		if !strings.Contains(canonicalScored, old) {
			t.Fatalf("the canonical record has no %q", old)
		}
		return strings.Replace(canonicalScored, old, new, 1)
	}
	cases := []struct {
		name    string
		value   string
		handled bool
		reason  stages.Reason
		rule    string
	}{
		{"canonical", canonicalScored, true, "", ""},
		{"white space", strings.NewReplacer(`,"`, " ,\n\t\"", `":`, `" : `).Replace(canonicalScored) + "\r\n", true, "", ""},
		{"decimals as numbers", rep(`"qty":"0.5","price":"101.25"`, `"qty":0.5,"price":101.25`), true, "", ""},
		{"realized_pnl a number", rep(`"realized_pnl":"-1.25000000"`, `"realized_pnl":-1.25`), true, "", ""},
		{"decimal with an exponent", rep(`"qty":"0.5"`, `"qty":"5e-1"`), true, "", ""},
		{"number with an exponent", rep(`"qty":"0.5"`, `"qty":5E-1`), true, "", ""},
		{"decimal with a plus", rep(`"qty":"0.5"`, `"qty":"+0.5"`), true, "", ""},
		{"decimal with leading zeros", rep(`"qty":"0.5"`, `"qty":"000.50"`), true, "", ""},
		{"negative zero", rep(`"fee":"0.0506"`, `"fee":"-0"`), true, "", ""},
		{"decimal of 17 digits", rep(`"qty":"0.5"`, `"qty":"1234567890.1234567"`), true, "", ""},
		{"decimal of 18 digits", rep(`"qty":"0.5"`, `"qty":"12345678901.1234567"`), true, "", ""},
		{"decimal of 40 digits", rep(`"qty":"0.5"`, `"qty":"1234567890123456789012345.123456789012345"`), true, "", ""},
		{"decimal ending in a point", rep(`"qty":"0.5"`, `"qty":"5."`), true, "", ""},
		{"decimal starting with a point", rep(`"qty":"0.5"`, `"qty":".5"`), true, "", ""},
		{"null labels", rep(`"labels":["revenge_trading"]`, `"labels":null`), true, "", ""},
		{"empty labels", rep(`"labels":["revenge_trading"]`, `"labels":[]`), true, "", ""},
		{"null lots", rep(`"lots":[{"qty":"0.5","pnl":"-1.25000000","labels":["overtrading","revenge_trading"]}]`, `"lots":null`), true, "", ""},
		{"empty lots", rep(`"lots":[{"qty":"0.5","pnl":"-1.25000000","labels":["overtrading","revenge_trading"]}]`, `"lots":[]`), true, "", ""},
		{"other label", rep(`"labels":["revenge_trading"]`, `"labels":["fomo","revenge_trading"]`), true, "", ""},
		{"offset ts", rep(`"ts":"2025-01-06T10:00:00Z"`, `"ts":"2025-01-06T12:00:00+02:00"`), true, "", ""},
		{"fractional ts", rep(`"ts":"2025-01-06T10:00:00Z"`, `"ts":"2025-01-06T10:00:00.123456789Z"`), true, "", ""},
		{"payload first", `{"payload":{"trade_id":"t","side":"BUY","ts":"2025-01-06T10:00:00Z","realized_pnl":"0"},"type":"trade.scored","event_id":"e","timestamp":"2025-01-06T10:00:00Z"}`, true, "", ""},
		{"non-ASCII symbol", rep(`"BTC-USD"`, `"BTC-€"`), true, "", ""},

		// Taken by the JSON decoder, with its result.
		{"escaped string", rep(`"ext_id":"x0001"`, `"ext_id":"x\u00300001"`), false, "", ""},
		{"unknown payload key", rep(`"symbol":`, `"venue":"x","symbol":`), false, "", ""},
		{"unknown envelope key", rep(`"timestamp":`, `"source":"x","timestamp":`), false, "", ""},
		{"key in other case", rep(`"ext_id":`, `"Ext_ID":`), false, "", ""},
		{"repeated key", rep(`"ext_id":"x0001"`, `"ext_id":"x0001","ext_id":"x0002"`), false, "", ""},
		{"null qty", rep(`"qty":"0.5"`, `"qty":null`), false, "", ""},
		{"null symbol", rep(`"symbol":"BTC-USD"`, `"symbol":null`), false, "", ""},
		{"no event_id", rep(`"event_id":"ts-1",`, ``), false, "", ""},
		{"no timestamp", rep(`"timestamp":"2025-01-06T10:01:00Z",`, ``), false, "", ""},
		{"digest.request", `{"event_id":"e","type":"digest.request","timestamp":"2025-01-06T10:00:00Z","payload":{"user_id":"u1","period_start":"2025-01-06"}}`, false, "", ""},
		{"other known type", rep(`"type":"trade.scored"`, `"type":"trade.upserted"`), false, "", ""},

		// Dead letters.
		{"not JSON", `{`, false, stages.ReasonDecodeError, ""},
		{"not UTF-8", strings.Replace(canonicalScored, "BTC", "B\xfeC", 1), false, stages.ReasonDecodeError, ""},
		{"not an object", `"trade.scored"`, false, stages.ReasonDecodeError, ""},
		{"trailing data", canonicalScored + `{}`, false, stages.ReasonDecodeError, ""},
		{"trailing comma", strings.TrimSuffix(canonicalScored, "}}") + `},}`, false, stages.ReasonDecodeError, ""},
		{"timestamp malformed", rep(`"timestamp":"2025-01-06T10:01:00Z"`, `"timestamp":"now"`), false, stages.ReasonDecodeError, ""},
		{"type missing", rep(`"type":"trade.scored",`, ``), false, stages.ReasonUnknownTaskType, ""},
		{"type unknown", rep(`"type":"trade.scored"`, `"type":"trade.deleted"`), false, stages.ReasonUnknownTaskType, ""},
		{"type a number", rep(`"type":"trade.scored"`, `"type":7`), false, stages.ReasonDecodeError, ""},
		{"payload missing", `{"event_id":"e","type":"trade.scored","timestamp":"2025-01-06T10:00:00Z"}`, false, stages.ReasonSanityFail, RuleScored},
		{"payload not an object", `{"event_id":"e","type":"trade.scored","timestamp":"2025-01-06T10:00:00Z","payload":[1]}`, false, stages.ReasonSanityFail, RuleScored},
		{"no trade_id", rep(`"trade_id":"3f8e2b1c-0d4a-5e6f-8a9b-0c1d2e3f4a5b",`, ``), false, stages.ReasonSanityFail, RuleScored},
		{"empty trade_id", rep(`"trade_id":"3f8e2b1c-0d4a-5e6f-8a9b-0c1d2e3f4a5b"`, `"trade_id":""`), false, stages.ReasonSanityFail, RuleScored},
		{"trade_id a number", rep(`"trade_id":"3f8e2b1c-0d4a-5e6f-8a9b-0c1d2e3f4a5b"`, `"trade_id":7`), false, stages.ReasonSanityFail, RuleScored},
		{"no ts", rep(`"ts":"2025-01-06T10:00:00Z",`, ``), false, stages.ReasonSanityFail, RuleScored},
		{"bad ts", rep(`"ts":"2025-01-06T10:00:00Z"`, `"ts":"yesterday"`), false, stages.ReasonSanityFail, RuleScored},
		{"side hold", rep(`"side":"SELL"`, `"side":"HOLD"`), false, stages.ReasonSanityFail, RuleScored},
		{"side lower case", rep(`"side":"SELL"`, `"side":"sell"`), false, stages.ReasonSanityFail, RuleScored},
		{"no realized_pnl", rep(`"realized_pnl":"-1.25000000",`, ``), false, stages.ReasonSanityFail, RuleScored},
		{"null realized_pnl", rep(`"realized_pnl":"-1.25000000"`, `"realized_pnl":null`), false, stages.ReasonSanityFail, RuleScored},
		{"bad realized_pnl", rep(`"realized_pnl":"-1.25000000"`, `"realized_pnl":"lots"`), false, stages.ReasonSanityFail, RuleScored},
		{"qty a boolean", rep(`"qty":"0.5"`, `"qty":true`), false, stages.ReasonDecodeError, ""},
		{"qty not a decimal", rep(`"qty":"0.5"`, `"qty":"half"`), false, stages.ReasonDecodeError, ""},
		{"qty hex", rep(`"qty":"0.5"`, `"qty":"0x10"`), false, stages.ReasonDecodeError, ""},
		{"qty out of range", rep(`"qty":"0.5"`, `"qty":"1e999"`), false, stages.ReasonDecodeError, ""},
		{"qty a JSON number with a leading zero", rep(`"qty":"0.5"`, `"qty":01`), false, stages.ReasonDecodeError, ""},
		{"lot pnl malformed", rep(`"pnl":"-1.25000000"`, `"pnl":"x"`), false, stages.ReasonDecodeError, ""},
		{"labels not an array", rep(`"labels":["revenge_trading"]`, `"labels":"revenge_trading"`), false, stages.ReasonDecodeError, ""},
		{"label a number", rep(`"labels":["revenge_trading"]`, `"labels":[1]`), false, stages.ReasonDecodeError, ""},
		{"lots not an array", rep(`"lots":[{"qty":"0.5","pnl":"-1.25000000","labels":["overtrading","revenge_trading"]}]`, `"lots":{}`), false, stages.ReasonDecodeError, ""},
		{"control character", rep(`"x0001"`, "\"x\t0001\""), false, stages.ReasonDecodeError, ""},
	}
	for _, c := range cases {
		handled := sameDecoding(t, c.name, []byte(c.value))
		if handled != c.handled {
			t.Errorf("%s: handled by the one-pass decoder %v, want %v", c.name, handled, c.handled)
		}
		_, err := decodeDigestIn([]byte("k"), []byte(c.value))
		checkRule(t, c.name, err, c.reason, c.rule)
	}
}

// Random byte-level mutations of real records decode exactly as the JSON
// decoder decodes them.
func TestDecodeScoredFastMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 2))
	values := scoredValues(t, rng, "u1", 80)
	alphabet := []byte(`{}[]",:.-+eE0159 nul\tZx` + "\xfe")
	for i := range 20000 {
		v := append([]byte(nil), values[rng.IntN(len(values))]...)
		for range 1 + rng.IntN(3) {
			j := rng.IntN(len(v))
			switch rng.IntN(3) {
			case 0:
				v[j] = alphabet[rng.IntN(len(alphabet))]
			case 1:
				v = append(v[:j], v[j+1:]...)
			default:
				v = append(v[:j], append([]byte{alphabet[rng.IntN(len(alphabet))]}, v[j:]...)...)
			}
		}
		sameDecoding(t, fmt.Sprintf("mutation %d", i), v)
	}
}

// FuzzDecodeDigestIn checks that decodeDigestIn decodes any value exactly
// as decodeDigestInJSON does.
func FuzzDecodeDigestIn(f *testing.F) {
	rng := rand.New(rand.NewPCG(16, 3))
	for _, v := range scoredValues(f, rng, "u1", 12) {
		f.Add(v)
	}
	f.Add([]byte(canonicalScored))
	f.Add([]byte(`{"event_id":"e","type":"digest.request","timestamp":"2025-01-06T10:00:00Z","payload":{"user_id":"u1","period_start":"2025-01-06"}}`))
	f.Add([]byte(`{"payload":{"trade_id":"t","side":"BUY","ts":"2025-01-06T10:00:00Z","realized_pnl":1e-3},"type":"trade.scored","event_id":"e","timestamp":"2025-01-06T10:00:00Z"}`))
	f.Fuzz(func(t *testing.T, value []byte) {
		sameDecoding(t, "fuzz", value)
	})
}

func BenchmarkDecodeDigestIn(b *testing.B) {
	rng := rand.New(rand.NewPCG(16, 4))
	values := scoredValues(b, rng, "bu00001", 600)
	for _, dec := range []struct {
		name string
		fn   func(k, v []byte) (digestIn, error)
	}{{"json", decodeDigestInJSON}, {"onepass", decodeDigestIn}} {
		b.Run(dec.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := dec.fn(nil, values[i%len(values)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
