package silver

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/stages"
)

// testNow is an instant whose UTC date (2025-06-01) differs from its date in
// Asia/Ho_Chi_Minh (2025-06-02 03:00 ICT), to prove the market zone is used.
var testNow = time.Date(2025, 6, 1, 20, 0, 0, 0, time.UTC)

func testClock() time.Time { return testNow }

// absent marks a field to delete from a base payload.
type absentT struct{}

var absent = absentT{}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func taBase() map[string]any {
	return map[string]any{
		"symbol": "VNM", "trade_date": "2025-06-02",
		"open": raw("10"), "high": raw("12"), "low": raw("9"), "close": raw("11"),
		"volume": raw("1000"),
	}
}

func saBase() map[string]any {
	return map[string]any{
		"url_canonical":   "https://cafef.vn/tin-tuc/a.html",
		"source_domain":   "cafef.vn",
		"publisher_time":  "2025-06-01T19:00:00Z",
		"first_seen_time": "2025-06-01T19:30:00Z",
		"language":        "vi",
		"text_normalized": strings.Repeat("ệ", 150),
		"content_hash":    "abc123",
		"symbols":         []string{"VNM", "FPT"},
	}
}

// envelope builds an envelope value from a base payload with overrides.
func envelope(t testing.TB, taskType string, base map[string]any, over map[string]any, extra map[string]any) []byte {
	t.Helper()
	p := map[string]any{}
	for k, v := range base {
		p[k] = v
	}
	for k, v := range over {
		if v == absent {
			delete(p, k)
			continue
		}
		p[k] = v
	}
	env := map[string]any{"task_type": taskType, "payload": p}
	for k, v := range extra {
		env[k] = v
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

// process runs Decode and the stage on value.
func process(value []byte, recordTime time.Time, opts ...Option) (Row, error) {
	env, err := Decode(nil, value)
	if err != nil {
		return Row{}, err
	}
	opts = append([]Option{WithClock(testClock)}, opts...)
	rows, err := Stage(opts...)(context.Background(), stages.Msg[Envelope]{Value: env, Source: stages.Source{Timestamp: recordTime}})
	if err != nil {
		return Row{}, err
	}
	if len(rows) != 1 {
		return Row{}, nil
	}
	return rows[0], nil
}

// wantClass asserts err's classification; reason "" means success.
func wantClass(t *testing.T, err error, reason stages.Reason, rule string, errContains ...string) {
	t.Helper()
	if reason == "" {
		if err != nil {
			t.Fatalf("want success, got %v", err)
		}
		return
	}
	c := stages.Classify(err)
	if c == nil {
		t.Fatalf("want %s/%s, got success", reason, rule)
	}
	if c.Kind != stages.KindDeadLetter || c.Reason != reason || c.Rule != rule {
		t.Fatalf("want dead-letter %s rule %q, got kind %v reason %s rule %q (%v)", reason, rule, c.Kind, c.Reason, c.Rule, err)
	}
	for _, s := range errContains {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err.Error(), s)
		}
	}
}

type ruleCase struct {
	name     string
	over     map[string]any
	extra    map[string]any // envelope fields
	opts     []Option
	reason   stages.Reason
	rule     string
	contains []string
	check    func(t *testing.T, r Row)
}

func runCases(t *testing.T, taskType string, base func() map[string]any, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			row, err := process(envelope(t, taskType, base(), tc.over, tc.extra), time.Time{}, tc.opts...)
			wantClass(t, err, tc.reason, tc.rule, tc.contains...)
			if err == nil && tc.check != nil {
				tc.check(t, row)
			}
		})
	}
}

const sanity = stages.ReasonSanityFail

func TestTARules(t *testing.T) {
	t.Parallel()
	volume := func(want int64) func(*testing.T, Row) {
		return func(t *testing.T, r Row) {
			if r.TA.Volume != want {
				t.Errorf("volume = %d, want %d", r.TA.Volume, want)
			}
		}
	}
	currency := func(want string) func(*testing.T, Row) {
		return func(t *testing.T, r Row) {
			if r.TA.Currency != want {
				t.Errorf("currency = %q, want %q", r.TA.Currency, want)
			}
		}
	}
	cases := []ruleCase{
		{name: "valid", check: func(t *testing.T, r Row) {
			if r.TA == nil || r.SA != nil || r.TA.Symbol != "VNM" {
				t.Fatalf("row = %+v", r)
			}
		}},
		// ta.symbol
		{name: "symbol 2 letters", over: map[string]any{"symbol": "VN"}, reason: sanity, rule: RuleTASymbol, contains: []string{`"VN"`}},
		{name: "symbol 3 letters", over: map[string]any{"symbol": "FPT"}},
		{name: "symbol 7 letters", over: map[string]any{"symbol": "ABCDEFG"}},
		{name: "symbol 8 letters", over: map[string]any{"symbol": "ABCDEFGH"}, reason: sanity, rule: RuleTASymbol, contains: []string{"ABCDEFGH"}},
		{name: "symbol lowercase", over: map[string]any{"symbol": "vnm"}, reason: sanity, rule: RuleTASymbol, contains: []string{"vnm"}},
		{name: "symbol mixed case", over: map[string]any{"symbol": "VNm"}, reason: sanity, rule: RuleTASymbol},
		{name: "symbol with digit", over: map[string]any{"symbol": "E1VFVN30"}, reason: sanity, rule: RuleTASymbol},
		{name: "symbol non-ASCII letters", over: map[string]any{"symbol": "ĐẠI"}, reason: sanity, rule: RuleTASymbol},
		{name: "symbol empty", over: map[string]any{"symbol": ""}, reason: sanity, rule: RuleTASymbol},
		{name: "symbol missing", over: map[string]any{"symbol": absent}, reason: sanity, rule: RuleTASymbol, contains: []string{"symbol missing"}},
		{name: "symbol null", over: map[string]any{"symbol": nil}, reason: sanity, rule: RuleTASymbol, contains: []string{"symbol missing"}},
		{name: "symbol wrong type", over: map[string]any{"symbol": raw("123")}, reason: sanity, rule: RuleTASymbol, contains: []string{"symbol", "number 123"}},
		// ta.trade_date (today is 2025-06-02 in Ho Chi Minh, 2025-06-01 in UTC)
		{name: "trade date today in market zone", over: map[string]any{"trade_date": "2025-06-02"}},
		{name: "trade date tomorrow in market zone", over: map[string]any{"trade_date": "2025-06-03"}, reason: sanity, rule: RuleTATradeDate, contains: []string{"2025-06-03", "2025-06-02"}},
		{name: "trade date today in market zone is future in UTC", over: map[string]any{"trade_date": "2025-06-02"}, opts: []Option{WithMarketLocation(time.UTC)}, reason: sanity, rule: RuleTATradeDate},
		{name: "trade date yesterday", over: map[string]any{"trade_date": "2025-06-01"}},
		{name: "trade date far past", over: map[string]any{"trade_date": "1999-01-04"}},
		{name: "trade date impossible day", over: map[string]any{"trade_date": "2025-02-30"}, reason: sanity, rule: RuleTATradeDate, contains: []string{"2025-02-30"}},
		{name: "trade date unpadded", over: map[string]any{"trade_date": "2025-6-2"}, reason: sanity, rule: RuleTATradeDate},
		{name: "trade date other format", over: map[string]any{"trade_date": "02/06/2025"}, reason: sanity, rule: RuleTATradeDate},
		{name: "trade date with time", over: map[string]any{"trade_date": "2025-06-02T00:00:00Z"}, reason: sanity, rule: RuleTATradeDate},
		{name: "trade date missing", over: map[string]any{"trade_date": absent}, reason: sanity, rule: RuleTATradeDate, contains: []string{"trade_date missing"}},
		{name: "trade date wrong type", over: map[string]any{"trade_date": raw("20250602")}, reason: sanity, rule: RuleTATradeDate, contains: []string{"number"}},
		// ta.price
		{name: "open negative", over: map[string]any{"open": raw("-1")}, reason: sanity, rule: RuleTAPrice, contains: []string{"open -1"}},
		{name: "low slightly negative", over: map[string]any{"low": raw("-0.01")}, reason: sanity, rule: RuleTAPrice, contains: []string{"low -0.01"}},
		{name: "all prices zero flat candle", over: map[string]any{"open": raw("0"), "high": raw("0"), "low": raw("0"), "close": raw("0")}},
		{name: "close missing", over: map[string]any{"close": absent}, reason: sanity, rule: RuleTAPrice, contains: []string{"close missing"}},
		{name: "high null", over: map[string]any{"high": nil}, reason: sanity, rule: RuleTAPrice, contains: []string{"high missing"}},
		{name: "open as string", over: map[string]any{"open": "10"}, reason: sanity, rule: RuleTAPrice, contains: []string{"open", "string"}},
		{name: "open as boolean", over: map[string]any{"open": true}, reason: sanity, rule: RuleTAPrice},
		{name: "price beyond double", over: map[string]any{"high": raw("1e400")}, reason: sanity, rule: RuleTAPrice, contains: []string{"1e400", "out of range"}},
		{name: "fractional prices", over: map[string]any{"open": raw("10.25"), "high": raw("12.5"), "low": raw("9.75"), "close": raw("11.05")}, check: func(t *testing.T, r Row) {
			if r.TA.Open != 10.25 || r.TA.High != 12.5 || r.TA.Low != 9.75 || r.TA.Close != 11.05 {
				t.Errorf("prices = %v %v %v %v", r.TA.Open, r.TA.High, r.TA.Low, r.TA.Close)
			}
		}},
		// ta.price_relation
		{name: "high below close", over: map[string]any{"high": raw("10.5")}, reason: sanity, rule: RuleTAPriceRelation, contains: []string{"high 10.5", "close 11"}},
		{name: "high below open", over: map[string]any{"open": raw("12.5")}, reason: sanity, rule: RuleTAPriceRelation, contains: []string{"open 12.5"}},
		{name: "low above open", over: map[string]any{"low": raw("10.5")}, reason: sanity, rule: RuleTAPriceRelation, contains: []string{"low 10.5", "open 10"}},
		{name: "low above close", over: map[string]any{"open": raw("11"), "close": raw("10"), "low": raw("10.5")}, reason: sanity, rule: RuleTAPriceRelation},
		{name: "high equals max and low equals min", over: map[string]any{"high": raw("11"), "low": raw("10")}},
		// ta.volume
		{name: "volume negative", over: map[string]any{"volume": raw("-1")}, reason: sanity, rule: RuleTAVolume, contains: []string{"volume -1"}},
		{name: "volume fractional", over: map[string]any{"volume": raw("1.5")}, reason: sanity, rule: RuleTAVolume, contains: []string{"1.5", "not an integer"}},
		{name: "volume tiny exponent", over: map[string]any{"volume": raw("1e-1")}, reason: sanity, rule: RuleTAVolume, contains: []string{"not an integer"}},
		{name: "volume exponent integral", over: map[string]any{"volume": raw("1e3")}, check: volume(1000)},
		{name: "volume decimal integral", over: map[string]any{"volume": raw("1000.0")}, check: volume(1000)},
		{name: "volume mantissa and exponent", over: map[string]any{"volume": raw("1.25e2")}, check: volume(125)},
		{name: "volume max int64", over: map[string]any{"volume": raw("9223372036854775807")}, check: volume(9223372036854775807)},
		{name: "volume beyond int64", over: map[string]any{"volume": raw("9223372036854775808")}, reason: sanity, rule: RuleTAVolume, contains: []string{"out of range"}},
		{name: "volume huge exponent", over: map[string]any{"volume": raw("1e30")}, reason: sanity, rule: RuleTAVolume, contains: []string{"out of range"}},
		{name: "volume as string", over: map[string]any{"volume": "10"}, reason: sanity, rule: RuleTAVolume, contains: []string{"volume", "string"}},
		{name: "volume missing", over: map[string]any{"volume": absent}, reason: sanity, rule: RuleTAVolume, contains: []string{"volume missing"}},
		// ta.zero_volume
		{name: "zero volume flat candle", over: map[string]any{"volume": raw("0"), "open": raw("10"), "high": raw("10"), "low": raw("10"), "close": raw("10")}, check: volume(0)},
		{name: "zero volume not flat", over: map[string]any{"volume": raw("0")}, reason: sanity, rule: RuleTAZeroVolume, contains: []string{"not flat"}},
		{name: "zero volume as 0e5 not flat", over: map[string]any{"volume": raw("0e5")}, reason: sanity, rule: RuleTAZeroVolume},
		// ta.currency
		{name: "currency absent", check: currency("VND")},
		{name: "currency empty", over: map[string]any{"currency": ""}, check: currency("VND")},
		{name: "currency null", over: map[string]any{"currency": nil}, check: currency("VND")},
		{name: "currency USD", over: map[string]any{"currency": "USD"}, check: currency("USD")},
		{name: "currency lowercase", over: map[string]any{"currency": "usd"}, reason: sanity, rule: RuleTACurrency, contains: []string{`"usd"`}},
		{name: "currency 2 letters", over: map[string]any{"currency": "US"}, reason: sanity, rule: RuleTACurrency},
		{name: "currency 4 letters", over: map[string]any{"currency": "USDT"}, reason: sanity, rule: RuleTACurrency},
		{name: "currency wrong type", over: map[string]any{"currency": raw("840")}, reason: sanity, rule: RuleTACurrency, contains: []string{"number 840"}},
		// fields without a rule
		{name: "vwap wrong type", over: map[string]any{"vwap": "10.5"}, reason: stages.ReasonDecodeError, contains: []string{"vwap"}},
		{name: "price_multiplier wrong type", over: map[string]any{"price_multiplier": "1"}, reason: stages.ReasonDecodeError, contains: []string{"price_multiplier"}},
		{name: "source wrong type", over: map[string]any{"source": raw("1")}, reason: stages.ReasonDecodeError, contains: []string{"source"}},
		{name: "first_seen_time not RFC 3339", over: map[string]any{"first_seen_time": "hôm qua"}, reason: stages.ReasonDecodeError, contains: []string{"first_seen_time"}},
		{name: "first_seen_time comma fraction", over: map[string]any{"first_seen_time": "2025-06-01T10:00:00,5Z"}, reason: stages.ReasonDecodeError, contains: []string{"first_seen_time", "RFC 3339"}},
		// first failure wins
		{name: "symbol, price and currency fail: symbol wins", over: map[string]any{"symbol": "x", "open": raw("-1"), "currency": "usd"}, reason: sanity, rule: RuleTASymbol},
		{name: "date and volume fail: date wins", over: map[string]any{"trade_date": "2999-01-01", "volume": raw("-1")}, reason: sanity, rule: RuleTATradeDate},
		{name: "price and volume fail: price wins", over: map[string]any{"close": absent, "volume": raw("1.5")}, reason: sanity, rule: RuleTAPrice},
		{name: "relation and zero volume fail: relation wins", over: map[string]any{"high": raw("10.5"), "volume": raw("0")}, reason: sanity, rule: RuleTAPriceRelation},
		{name: "zero volume and currency fail: zero volume wins", over: map[string]any{"volume": raw("0"), "currency": "usd"}, reason: sanity, rule: RuleTAZeroVolume},
		{name: "rule failure beats unruled type error", over: map[string]any{"vwap": "x", "currency": "usd"}, reason: sanity, rule: RuleTACurrency},
	}
	runCases(t, TaskTA, taBase, cases)
}

func TestSARules(t *testing.T) {
	t.Parallel()
	lang := func(want string) func(*testing.T, Row) {
		return func(t *testing.T, r Row) {
			if r.SA.Language == nil || *r.SA.Language != want {
				t.Errorf("language = %v, want %q", r.SA.Language, want)
			}
		}
	}
	firstSeen := func(want string) func(*testing.T, Row) {
		return func(t *testing.T, r Row) {
			w, _ := time.Parse(time.RFC3339, want)
			if !r.SA.FirstSeenTime.Equal(w) {
				t.Errorf("first_seen_time = %v, want %v", r.SA.FirstSeenTime, w)
			}
		}
	}
	// testNow = 2025-06-01T20:00:00Z
	cases := []ruleCase{
		{name: "valid", check: func(t *testing.T, r Row) {
			if r.SA == nil || r.TA != nil || r.SA.URLCanonical != "https://cafef.vn/tin-tuc/a.html" {
				t.Fatalf("row = %+v", r)
			}
		}},
		// sa.url
		{name: "url without scheme", over: map[string]any{"url_canonical": "cafef.vn/tin-tuc/a.html"}, reason: sanity, rule: RuleSAURL, contains: []string{"cafef.vn/tin-tuc/a.html"}},
		{name: "url ftp", over: map[string]any{"url_canonical": "ftp://cafef.vn/a"}, reason: sanity, rule: RuleSAURL, contains: []string{`"ftp"`}},
		{name: "url without host", over: map[string]any{"url_canonical": "https:///a.html"}, reason: sanity, rule: RuleSAURL, contains: []string{"no host"}},
		{name: "url scheme only", over: map[string]any{"url_canonical": "https://"}, reason: sanity, rule: RuleSAURL},
		{name: "url port without host", over: map[string]any{"url_canonical": "https://:443/a"}, reason: sanity, rule: RuleSAURL},
		{name: "url opaque", over: map[string]any{"url_canonical": "http:cafef.vn"}, reason: sanity, rule: RuleSAURL},
		{name: "url empty", over: map[string]any{"url_canonical": ""}, reason: sanity, rule: RuleSAURL, contains: []string{"empty"}},
		{name: "url blank", over: map[string]any{"url_canonical": "  "}, reason: sanity, rule: RuleSAURL},
		{name: "url missing", over: map[string]any{"url_canonical": absent}, reason: sanity, rule: RuleSAURL, contains: []string{"url_canonical missing"}},
		{name: "url wrong type", over: map[string]any{"url_canonical": raw("42")}, reason: sanity, rule: RuleSAURL, contains: []string{"number 42"}},
		{name: "url http", over: map[string]any{"url_canonical": "http://cafef.vn"}},
		{name: "url upper-case scheme", over: map[string]any{"url_canonical": "HTTPS://cafef.vn/a"}},
		{name: "url with a space", over: map[string]any{"url_canonical": "https://cafef.vn/a b.html"}, reason: sanity, rule: RuleSAURL, contains: []string{"white space"}},
		{name: "url with a trailing space", over: map[string]any{"url_canonical": "https://cafef.vn/a.html "}, reason: sanity, rule: RuleSAURL},
		{name: "url with a no-break space", over: map[string]any{"url_canonical": "https://cafef.vn/a.html\u00a0"}, reason: sanity, rule: RuleSAURL},
		{name: "url percent-encoded space", over: map[string]any{"url_canonical": "https://cafef.vn/a%20b.html"}},
		{name: "url with non-ASCII path", over: map[string]any{"url_canonical": "https://cafef.vn/thị-trường.html"}},
		// sa.publisher_time
		{name: "publisher time now+4m", over: map[string]any{"publisher_time": "2025-06-01T20:04:00Z"}},
		{name: "publisher time now+5m exactly", over: map[string]any{"publisher_time": "2025-06-01T20:05:00Z"}},
		{name: "publisher time now+5m+1µs", over: map[string]any{"publisher_time": "2025-06-01T20:05:00.000001Z"}, reason: sanity, rule: RuleSAPublisherTime},
		{name: "publisher time now+6m", over: map[string]any{"publisher_time": "2025-06-01T20:06:00Z"}, reason: sanity, rule: RuleSAPublisherTime, contains: []string{"2025-06-01T20:06:00Z"}},
		{name: "publisher time now+6m with offset", over: map[string]any{"publisher_time": "2025-06-02T03:06:00+07:00"}, reason: sanity, rule: RuleSAPublisherTime},
		{name: "publisher time with offset in the past", over: map[string]any{"publisher_time": "2025-06-02T02:00:00+07:00", "first_seen_time": "2025-06-01T19:00:00Z"}},
		{name: "publisher time missing", over: map[string]any{"publisher_time": absent}, reason: sanity, rule: RuleSAPublisherTime, contains: []string{"publisher_time missing"}},
		{name: "publisher time not RFC 3339", over: map[string]any{"publisher_time": "2025-06-01 19:00:00"}, reason: sanity, rule: RuleSAPublisherTime},
		{name: "publisher time wrong type", over: map[string]any{"publisher_time": raw("1748800000")}, reason: sanity, rule: RuleSAPublisherTime, contains: []string{"number"}},
		// RFC 3339 exactly: time.Parse also takes these, RFC 3339 does not.
		{name: "publisher time comma fraction", over: map[string]any{"publisher_time": "2025-06-01T19:00:00,5Z"}, reason: sanity, rule: RuleSAPublisherTime, contains: []string{"RFC 3339"}},
		{name: "publisher time one-digit hour", over: map[string]any{"publisher_time": "2025-06-01T9:00:00Z"}, reason: sanity, rule: RuleSAPublisherTime},
		{name: "publisher time offset hour 24", over: map[string]any{"publisher_time": "2025-06-02T19:00:00+24:00"}, reason: sanity, rule: RuleSAPublisherTime},
		{name: "publisher time offset minute 60", over: map[string]any{"publisher_time": "2025-06-02T01:00:00+06:60"}, reason: sanity, rule: RuleSAPublisherTime},
		// RFC 3339 §5.6: "T" and "Z" may be lower case.
		{name: "publisher time lower-case t and z", over: map[string]any{"publisher_time": "2025-06-01t18:00:00.5z"}, check: func(t *testing.T, r Row) {
			if want := time.Date(2025, 6, 1, 18, 0, 0, 5e8, time.UTC); !r.SA.PublisherTime.Equal(want) {
				t.Errorf("publisher_time = %v, want %v", r.SA.PublisherTime, want)
			}
		}},
		{name: "publisher time lower-case t with offset", over: map[string]any{"publisher_time": "2025-06-02t01:00:00+07:00"}},
		// sa.first_seen (publisher 2025-06-01T19:00:00Z)
		{name: "first seen exactly 24h before publisher", over: map[string]any{"first_seen_time": "2025-05-31T19:00:00Z"}, check: firstSeen("2025-05-31T19:00:00Z")},
		{name: "first seen 24h+1s before publisher", over: map[string]any{"first_seen_time": "2025-05-31T18:59:59Z"}, reason: sanity, rule: RuleSAFirstSeen, contains: []string{"2025-05-31T18:59:59Z"}},
		{name: "first seen missing everywhere", over: map[string]any{"first_seen_time": absent}, reason: sanity, rule: RuleSAFirstSeen, contains: []string{"missing"}},
		{name: "first seen from envelope", over: map[string]any{"first_seen_time": absent}, extra: map[string]any{"first_seen": "2025-06-01T19:45:00Z"}, check: firstSeen("2025-06-01T19:45:00Z")},
		{name: "first seen from envelope too old", over: map[string]any{"first_seen_time": nil}, extra: map[string]any{"first_seen": "2025-05-30T00:00:00Z"}, reason: sanity, rule: RuleSAFirstSeen},
		{name: "payload first seen wins over envelope", extra: map[string]any{"first_seen": "2025-06-01T19:45:00Z"}, check: firstSeen("2025-06-01T19:30:00Z")},
		{name: "first seen wrong type", over: map[string]any{"first_seen_time": raw("1")}, reason: sanity, rule: RuleSAFirstSeen},
		{name: "first seen not RFC 3339", over: map[string]any{"first_seen_time": "01/06/2025"}, reason: sanity, rule: RuleSAFirstSeen},
		{name: "first seen offset hour 24", over: map[string]any{"first_seen_time": "2025-06-02T19:30:00+24:00"}, reason: sanity, rule: RuleSAFirstSeen},
		// sa.text: "ệ" is 3 bytes, so 119 code points are 357 bytes.
		{name: "text 119 code points", over: map[string]any{"text_normalized": strings.Repeat("ệ", 119)}, reason: sanity, rule: RuleSAText, contains: []string{"119"}},
		{name: "text 120 code points", over: map[string]any{"text_normalized": strings.Repeat("ệ", 120)}},
		{name: "text 40 code points in 120 bytes", over: map[string]any{"text_normalized": strings.Repeat("ệ", 40)}, reason: sanity, rule: RuleSAText, contains: []string{"40"}},
		{name: "text missing", over: map[string]any{"text_normalized": absent}, reason: sanity, rule: RuleSAText},
		{name: "text wrong type", over: map[string]any{"text_normalized": raw(`["a"]`)}, reason: sanity, rule: RuleSAText, contains: []string{"array"}},
		// sa.content_hash
		{name: "content hash empty", over: map[string]any{"content_hash": ""}, reason: sanity, rule: RuleSAContentHash},
		{name: "content hash blank", over: map[string]any{"content_hash": "   "}, reason: sanity, rule: RuleSAContentHash},
		{name: "content hash missing", over: map[string]any{"content_hash": absent}, reason: sanity, rule: RuleSAContentHash},
		{name: "content hash wrong type", over: map[string]any{"content_hash": raw("5")}, reason: sanity, rule: RuleSAContentHash},
		// sa.symbols
		{name: "symbols absent", over: map[string]any{"symbols": absent}, check: func(t *testing.T, r Row) {
			if r.SA.Symbols != nil {
				t.Errorf("symbols = %#v, want nil", r.SA.Symbols)
			}
		}},
		{name: "symbols null", over: map[string]any{"symbols": nil}},
		{name: "symbols empty", over: map[string]any{"symbols": []string{}}, check: func(t *testing.T, r Row) {
			if r.SA.Symbols == nil || len(r.SA.Symbols) != 0 {
				t.Errorf("symbols = %#v, want empty non-nil", r.SA.Symbols)
			}
		}},
		{name: "one bad symbol in the list", over: map[string]any{"symbols": []string{"VNM", "vnm", "FPT"}}, reason: sanity, rule: RuleSASymbols, contains: []string{"symbols[1]", `"vnm"`}},
		{name: "symbol of 8 letters in the list", over: map[string]any{"symbols": []string{"ABCDEFGH"}}, reason: sanity, rule: RuleSASymbols},
		{name: "symbol of 2 letters in the list", over: map[string]any{"symbols": []string{"AB"}}, reason: sanity, rule: RuleSASymbols},
		{name: "symbols as a string", over: map[string]any{"symbols": "VNM"}, reason: sanity, rule: RuleSASymbols, contains: []string{"string"}},
		{name: "symbols with a number", over: map[string]any{"symbols": raw(`["VNM",1]`)}, reason: sanity, rule: RuleSASymbols, contains: []string{"symbols[1]"}},
		// sa.source_domain
		{name: "source domain empty", over: map[string]any{"source_domain": ""}, reason: sanity, rule: RuleSASourceDomain},
		{name: "source domain missing", over: map[string]any{"source_domain": absent}, reason: sanity, rule: RuleSASourceDomain},
		{name: "source domain wrong type", over: map[string]any{"source_domain": raw("7")}, reason: sanity, rule: RuleSASourceDomain},
		// language normalisation
		{name: "language vi", check: lang("vi")},
		{name: "language en", over: map[string]any{"language": "en"}, check: lang("en")},
		{name: "language fr", over: map[string]any{"language": "fr"}, check: lang("unknown")},
		{name: "language absent", over: map[string]any{"language": absent}, check: lang("unknown")},
		{name: "language upper case", over: map[string]any{"language": "VI"}, check: lang("unknown")},
		{name: "language wrong type", over: map[string]any{"language": raw("5")}, check: lang("unknown")},
		// fields without a rule
		{name: "title wrong type", over: map[string]any{"title": raw("5")}, reason: stages.ReasonDecodeError, contains: []string{"title"}},
		{name: "hype_raw wrong type", over: map[string]any{"hype_raw": "0.5"}, reason: stages.ReasonDecodeError, contains: []string{"hype_raw"}},
		{name: "account_weights_applied wrong type", over: map[string]any{"account_weights_applied": "yes"}, reason: stages.ReasonDecodeError},
		{name: "topic_tags wrong type", over: map[string]any{"topic_tags": "macro"}, reason: stages.ReasonDecodeError},
		// first failure wins
		{name: "url and everything else fail: url wins", over: map[string]any{"url_canonical": "ftp://x", "publisher_time": absent, "text_normalized": "short", "source_domain": ""}, reason: sanity, rule: RuleSAURL},
		{name: "publisher and text fail: publisher wins", over: map[string]any{"publisher_time": "2999-01-01T00:00:00Z", "text_normalized": "short"}, reason: sanity, rule: RuleSAPublisherTime},
		{name: "first seen and hash fail: first seen wins", over: map[string]any{"first_seen_time": "2020-01-01T00:00:00Z", "content_hash": ""}, reason: sanity, rule: RuleSAFirstSeen},
		{name: "text and domain fail: text wins", over: map[string]any{"text_normalized": "short", "source_domain": ""}, reason: sanity, rule: RuleSAText},
		{name: "hash and symbols fail: hash wins", over: map[string]any{"content_hash": "", "symbols": "VNM"}, reason: sanity, rule: RuleSAContentHash},
		{name: "symbols and domain fail: symbols wins", over: map[string]any{"symbols": []string{"x"}, "source_domain": absent}, reason: sanity, rule: RuleSASymbols},
	}
	runCases(t, TaskSA, saBase, cases)
}

func TestTextLengthCountsCodePoints(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("ệ", 119)
	if len(s) == utf8.RuneCountInString(s) {
		t.Fatal("test text must have more bytes than code points")
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	dec := stages.ReasonDecodeError
	unk := stages.ReasonUnknownTaskType
	cases := []struct {
		name   string
		value  string
		reason stages.Reason
		check  func(t *testing.T, e Envelope)
	}{
		{name: "not JSON", value: `not json`, reason: dec},
		{name: "truncated", value: `{"task_type":"ta.bar","payload":{"symbol":"VNM"`, reason: dec},
		{name: "empty value", value: ``, reason: dec},
		{name: "null value", value: `null`, reason: dec},
		{name: "top-level array", value: `["ta.bar"]`, reason: dec},
		{name: "payload missing", value: `{"task_type":"ta.bar"}`, reason: dec},
		{name: "payload null", value: `{"task_type":"ta.bar","payload":null}`, reason: dec},
		{name: "payload string", value: `{"task_type":"ta.bar","payload":"{\"symbol\":\"VNM\"}"}`, reason: dec},
		{name: "payload array", value: `{"task_type":"ta.bar","payload":[1]}`, reason: dec},
		{name: "task_id object", value: `{"task_type":"ta.bar","payload":{},"task_id":{}}`, reason: dec},
		{name: "first_seen not RFC 3339", value: `{"task_type":"ta.bar","payload":{},"first_seen":"hôm nay"}`, reason: dec},
		{name: "first_seen comma fraction", value: `{"task_type":"ta.bar","payload":{},"first_seen":"2025-06-01T10:00:00,5Z"}`, reason: dec},
		{name: "task_type invalid UTF-8", value: "{\"task_type\":\"ta.bar\xff\",\"payload\":{}}", reason: dec},
		{name: "task_type lone surrogate", value: `{"task_type":"ta.bar\udc00","payload":{}}`, reason: dec},
		{name: "task_id invalid UTF-8", value: "{\"task_type\":\"ta.bar\",\"payload\":{},\"task_id\":\"t\xc3\"}", reason: dec},
		{name: "unknown member with invalid text is ignored", value: "{\"task_type\":\"ta.bar\",\"payload\":{\"x\\ud800\":\"\xff\"},\"n\\udfff\":1}"},
		{name: "first_seen number", value: `{"task_type":"ta.bar","payload":{},"first_seen":1}`, reason: dec},
		{name: "bad payload beats missing task type", value: `{"payload":5}`, reason: dec},
		{name: "task_type missing", value: `{"payload":{}}`, reason: unk},
		{name: "task_type null", value: `{"task_type":null,"payload":{}}`, reason: unk},
		{name: "task_type other", value: `{"task_type":"ta.tick","payload":{}}`, reason: unk},
		{name: "task_type empty", value: `{"task_type":"","payload":{}}`, reason: unk},
		{name: "task_type case differs", value: `{"task_type":"TA.BAR","payload":{}}`, reason: unk},
		{name: "task_type number", value: `{"task_type":5,"payload":{}}`, reason: unk},
		{name: "ta envelope", value: `{"task_type":"ta.bar","payload":{"symbol":"VNM"},"task_id":"t-1","first_seen":"2025-06-01T10:00:00.1234567+07:00"}`, check: func(t *testing.T, e Envelope) {
			want := time.Date(2025, 6, 1, 3, 0, 0, 123456000, time.UTC)
			if e.TaskType != TaskTA || e.TaskID != "t-1" || !e.FirstSeen.Equal(want) || string(e.Payload) != `{"symbol":"VNM"}` {
				t.Errorf("envelope = %+v (first_seen %v, want %v)", e, e.FirstSeen, want)
			}
		}},
		{name: "sa envelope numeric task id", value: `{"task_type":"sa.article","payload":{},"task_id":42}`, check: func(t *testing.T, e Envelope) {
			if e.TaskType != TaskSA || e.TaskID != "42" || !e.FirstSeen.IsZero() {
				t.Errorf("envelope = %+v", e)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := Decode([]byte("k"), []byte(tc.value))
			wantClass(t, err, tc.reason, "")
			if err == nil && tc.check != nil {
				tc.check(t, e)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestTransformTARow(t *testing.T) {
	t.Parallel()
	over := map[string]any{
		"open": raw("25350"), "high": raw("25800"), "low": raw("25100"), "close": raw("25700"),
		"volume": raw("1234500"), "vwap": raw("25512.5"), "adj_close": raw("25700"), "currency": "VND",
		"price_multiplier": raw("1000"), "source": "hose", "content_hash": "h1",
		"first_seen_time": "2025-06-02T01:02:03.123456789+07:00", "unknown_field": "ignored",
	}
	row, err := process(envelope(t, TaskTA, taBase(), over, map[string]any{"task_id": "7"}), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := TARow{
		Symbol: "VNM", TradeDate: time.Date(2025, 6, 2, 0, 0, 0, 0, time.UTC),
		Open: 25350, High: 25800, Low: 25100, Close: 25700, Volume: 1234500,
		VWAP: ptr(25512.5), AdjClose: ptr(25700.0), Currency: "VND", PriceMultiplier: 1000,
		Source: ptr("hose"), ContentHash: ptr("h1"),
		FirstSeenTime: time.Date(2025, 6, 1, 18, 2, 3, 123456000, time.UTC),
	}
	got := *row.TA
	if !got.FirstSeenTime.Equal(want.FirstSeenTime) {
		t.Errorf("first_seen_time = %v, want %v (truncated to µs)", got.FirstSeenTime, want.FirstSeenTime)
	}
	got.FirstSeenTime = want.FirstSeenTime
	if !reflect.DeepEqual(got, want) {
		t.Errorf("row =\n%+v\nwant\n%+v", got, want)
	}
}

func TestTAFirstSeenFallbacks(t *testing.T) {
	t.Parallel()
	recTime := time.Date(2025, 6, 1, 12, 0, 0, 999, time.UTC)
	envFS := "2025-06-01T11:00:00Z"
	payFS := "2025-06-01T10:00:00Z"
	cases := []struct {
		name    string
		over    map[string]any
		extra   map[string]any
		recTime time.Time
		want    time.Time
	}{
		{"payload wins", map[string]any{"first_seen_time": payFS}, map[string]any{"first_seen": envFS}, recTime, time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)},
		{"envelope next", nil, map[string]any{"first_seen": envFS}, recTime, time.Date(2025, 6, 1, 11, 0, 0, 0, time.UTC)},
		{"record timestamp next", nil, nil, recTime, time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)},
		{"clock last", nil, nil, time.Time{}, testNow},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			row, err := process(envelope(t, TaskTA, taBase(), tc.over, tc.extra), tc.recTime)
			if err != nil {
				t.Fatal(err)
			}
			if !row.TA.FirstSeenTime.Equal(tc.want) {
				t.Errorf("first_seen_time = %v, want %v", row.TA.FirstSeenTime, tc.want)
			}
			if row.TA.PriceMultiplier != 1.0 || row.TA.Currency != "VND" || row.TA.VWAP != nil || row.TA.Source != nil {
				t.Errorf("defaults not applied: %+v", row.TA)
			}
		})
	}
}

func TestTransformSARow(t *testing.T) {
	t.Parallel()
	over := map[string]any{
		"publisher_time":          "2025-06-02T01:00:00+07:00",
		"first_seen_time":         "2025-06-01T18:30:00Z",
		"language":                "en",
		"title":                   "Tiêu đề",
		"author":                  "Phóng viên",
		"topic_tags":              []string{"vi-mo"},
		"hype_raw":                raw("0.5"),
		"hype_crowd":              raw("1e-3"),
		"hype_elitist":            raw("-2"),
		"account_weights_applied": true,
	}
	row, err := process(envelope(t, TaskSA, saBase(), over, nil), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("ệ", 150)
	want := SARow{
		URLCanonical: "https://cafef.vn/tin-tuc/a.html", SourceDomain: "cafef.vn",
		PublisherTime: time.Date(2025, 6, 1, 18, 0, 0, 0, time.UTC), FirstSeenTime: time.Date(2025, 6, 1, 18, 30, 0, 0, time.UTC),
		Language: ptr("en"), Title: ptr("Tiêu đề"), TextNormalized: &text, ContentHash: "abc123",
		Symbols: []string{"VNM", "FPT"}, Author: ptr("Phóng viên"), TopicTags: []string{"vi-mo"},
		HypeRaw: ptr(0.5), HypeCrowd: ptr(0.001), HypeElitist: ptr(-2.0), AccountWeightsApplied: ptr(true),
	}
	got := *row.SA
	if !got.PublisherTime.Equal(want.PublisherTime) || !got.FirstSeenTime.Equal(want.FirstSeenTime) {
		t.Errorf("times = %v, %v", got.PublisherTime, got.FirstSeenTime)
	}
	got.PublisherTime, got.FirstSeenTime = want.PublisherTime, want.FirstSeenTime
	if !reflect.DeepEqual(got, want) {
		t.Errorf("row =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseInteger(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want int64
		err  error
	}{
		{"0", 0, nil}, {"-0", 0, nil}, {"0.000", 0, nil}, {"0e-999999999999", 0, nil},
		{"7", 7, nil}, {"-7", -7, nil}, {"1e3", 1000, nil}, {"1E3", 1000, nil}, {"1e+3", 1000, nil},
		{"12.50e1", 125, nil}, {"1000.0", 1000, nil}, {"100e-2", 1, nil},
		{"1.5", 0, errNotInteger}, {"1e-1", 0, errNotInteger}, {"1e-99999999999999999999", 0, errNotInteger},
		{"9223372036854775807", 9223372036854775807, nil}, {"-9223372036854775808", -9223372036854775808, nil},
		{"9223372036854775808", 0, errIntRange}, {"1e19", 0, errIntRange}, {"1e99999999999999999999", 0, errIntRange},
		{"00012", 12, nil},
	}
	for _, tc := range cases {
		got, err := parseInteger(tc.in)
		if err != tc.err || got != tc.want {
			t.Errorf("parseInteger(%q) = %d, %v; want %d, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestParseRFC3339MatchesTimeParse(t *testing.T) {
	t.Parallel()
	inputs := []string{
		"2025-06-01T19:00:00Z", "2025-06-01T19:00:00.1Z", "2025-06-01T19:00:00.123456789Z", "2025-06-01T19:00:00.1234567891234Z",
		"2025-06-01T19:00:00+07:00", "2025-06-01T19:00:00-05:30", "2025-06-01T19:00:00+00:00", "2025-06-01T19:00:00-00:00",
		"2025-06-01T19:00:00+14:00", "2025-06-01T19:00:00+23:59", "2025-06-01T19:00:00+24:00", "2025-06-01T19:00:00+07:60",
		"2024-02-29T00:00:00Z", "2025-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2025-04-31T00:00:00Z",
		"2025-12-31T23:59:59Z", "2025-13-01T00:00:00Z", "2025-00-01T00:00:00Z", "2025-06-00T00:00:00Z", "2025-06-01T24:00:00Z",
		"2025-06-01T23:60:00Z", "2025-06-01T23:59:60Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z",
		"2025-06-01t19:00:00z", "2025-06-01T19:00:00z", "2025-06-01 19:00:00Z", "2025-06-01T19:00:00", "2025-06-01T19:00Z",
		"2025-06-01T19:00:00,5Z", "2025-06-01T19:00:00.Z", "2025-06-01T19:00:00.5", "2025-06-01T19:00:00+0700",
		"2025-6-01T19:00:00Z", "+025-06-01T19:00:00Z", "2025-06-01T9:00:00Z", "2025-06-01T19:00:00ZZ", "2025-06-01T19:00:00 Z",
		"2025-06-01T19:00:00.123+07:00", "2025-06-01T19:00:00.000000001-12:00", "", "hôm qua", "2025-06-01",
		"2025-06-01t19:00:00.5+07:00", "2025-06-01t19:00:00Z", "2025-06-01T19:00:00.123z", "2025-06-01t24:00:00z", "2025-06-01t19:00:00+24:00",
		"2025-06-01T19:00:00,123+07:00", "2025-06-01T19:0:00Z", "2025-06-01T19:00:0Z", "2025-06-01T19:00:00+7:00",
	}
	for i := 0; i < 2000; i++ { // pseudo-random well-formed times with every offset
		inputs = append(inputs, fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d.%0*dZ", 1990+i%40, 1+i%12, 1+i%31, i%24, i*7%60, i*13%60, 1+i%12, i*7919%1000000),
			fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d%c%02d:%02d", 1990+i%40, 1+i%12, 1+i*3%31, i*5%24, i*11%60, i*17%60, "+-"[i%2], i%25, []int{0, 30, 45, 59}[i%4]))
	}
	fast := 0
	for _, in := range inputs {
		got, ok := parseRFC3339([]byte(in))
		if ok {
			fast++
		}
		want, err := time.Parse(time.RFC3339Nano, in)
		if ok && (err != nil || !reflect.DeepEqual(got, want)) {
			t.Errorf("parseRFC3339(%q) = %v (%v), time.Parse = %v, %v", in, got, got.Location(), want, err)
		}
		// The field parser takes what RFC 3339's grammar takes ("T" and "Z"
		// in either case) and, of that, gives what time.Parse gives for the
		// upper-case spelling.
		rfc := rfc3339Grammar.MatchString(in)
		up := in
		if rfc {
			up = strings.ToUpper(in)
		}
		wantF, errF := time.Parse(time.RFC3339Nano, up)
		ft, ferr := parseTimeField([]byte(strconv.Quote(in)))
		if (ferr == nil) != (rfc && errF == nil) || (ferr == nil && !reflect.DeepEqual(ft, wantF.Truncate(time.Microsecond))) {
			t.Errorf("parseTimeField(%q) = %v, %v; RFC 3339 grammar %v, time.Parse(%q) = %v, %v", in, ft, ferr, rfc, up, wantF, errF)
		}
		if err != nil && ferr != nil && ferr.Error() != fmt.Sprintf("%q is not an RFC 3339 time: %v", in, err) {
			t.Errorf("parseTimeField(%q) error %q", in, ferr)
		}
		if err == nil && ferr != nil && !strings.Contains(ferr.Error(), "is not an RFC 3339 time") {
			t.Errorf("parseTimeField(%q) error %q", in, ferr)
		}
	}
	if fast < len(inputs)/2 {
		t.Errorf("fast path taken for %d of %d inputs", fast, len(inputs))
	}
}

// rfc3339Grammar is RFC 3339's date-time (§5.6) with "T" and "Z" in either
// case; the ranges of the date and time fields are left to time.Parse.
var rfc3339Grammar = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`)

func TestParseDateMatchesTimeParse(t *testing.T) {
	t.Parallel()
	inputs := []string{"2025-02-29", "2024-02-29", "1900-02-29", "2000-02-29", "0000-01-01", "9999-12-31", "2025-00-10", "2025-13-10",
		"2025-06-00", "2025-06-31", "2025-6-01", "2025-06-1", "+025-06-01", "-001-06-01", "2025/06/01", "2025-06-01 ", "20250601", ""}
	for d := time.Date(1999, 12, 25, 0, 0, 0, 0, time.UTC); d.Year() < 2001; d = d.AddDate(0, 0, 1) {
		inputs = append(inputs, d.Format(time.DateOnly))
	}
	for _, in := range inputs {
		got, ok := parseDate([]byte(in))
		want, err := time.Parse(time.DateOnly, in)
		if ok && (err != nil || !reflect.DeepEqual(got, want)) {
			t.Errorf("parseDate(%q) = %v, time.Parse = %v, %v", in, got, want, err)
		}
		if !ok && err == nil && len(in) == 10 && in[0] != '+' && in[0] != '-' {
			t.Errorf("parseDate(%q) missed a plain date", in)
		}
	}
}

func TestParseShortDecimalMatchesStrconv(t *testing.T) {
	t.Parallel()
	inputs := []string{"0", "-0", "0.0", "-0.000", "1", "-1", "10.25", "0.1", "0.3", "123456789012345", "1234567890123456",
		"12345678901234.5", "1234567890123.45", "0.000000000000001", "0.0000000000000001", "99999999999999.9", "1.", ".5", ".", "-", "", "1e3", "1.5e2", "--1", "1.2.3", "00012.50"}
	x := uint64(1)
	for i := 0; i < 100000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		digits := strconv.FormatUint(x>>(x%40), 10)
		digits = digits[:1+int(x>>7)%min(len(digits), 17)]
		if p := int(x>>13) % (len(digits) + 1); p < len(digits) {
			digits = digits[:p] + "." + digits[p:]
			if p == 0 {
				digits = "0" + digits
			}
		}
		if x>>20&1 == 1 {
			digits = "-" + digits
		}
		inputs = append(inputs, digits)
	}
	fast := 0
	for _, in := range inputs {
		got, ok := parseShortDecimal([]byte(in))
		if !ok {
			continue
		}
		fast++
		want, err := strconv.ParseFloat(in, 64)
		if err != nil || math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("parseShortDecimal(%q) = %v, strconv = %v, %v", in, got, want, err)
		}
	}
	if fast < len(inputs)/2 {
		t.Errorf("fast path taken for %d of %d inputs", fast, len(inputs))
	}
	if _, ok := parseShortDecimal([]byte("25512.5")); !ok {
		t.Error("fast path not taken for a plain price")
	}
}

func TestParseIntegerBytesMatchesParseInteger(t *testing.T) {
	t.Parallel()
	inputs := []string{"0", "-0", "7", "-7", "100", "123456789012345678", "-123456789012345678", "1234567890123456789",
		"9223372036854775807", "-9223372036854775808", "9223372036854775808", "1e3", "1.5", "1000.0", "00012", "-", ""}
	for _, in := range inputs {
		got, err := parseIntegerBytes([]byte(in))
		want, werr := parseInteger(in)
		if got != want || err != werr {
			t.Errorf("parseIntegerBytes(%q) = %d, %v; parseInteger %d, %v", in, got, err, want, werr)
		}
	}
}

func TestRuneCount(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "a", "é", "ệ", "😀", strings.Repeat("ệa😀", 11), "Thị trường chứng khoán", "\uFFFD\u0000x"} {
		for k := 0; k < 9; k++ {
			in := strings.Repeat("x", k) + s
			if got, want := runeCount([]byte(in)), utf8.RuneCountInString(in); got != want {
				t.Errorf("runeCount(%q) = %d, want %d", in, got, want)
			}
		}
	}
	for _, r := range GenerateCorpus(5, 500, 0) {
		env, err := Decode(nil, r.Value)
		if err != nil || env.TaskType != TaskSA {
			continue
		}
		p := payload{b: env.Payload, fields: env.fields}
		text, err := p.requiredString(fTextNormalized)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := runeCount(text), utf8.RuneCount(text); got != want {
			t.Errorf("runeCount = %d, want %d", got, want)
		}
	}
}

func TestPlainHTTPURLIsAccepted(t *testing.T) {
	t.Parallel()
	accepted := []string{"https://cafef.vn/tin-tuc/a.html", "http://cafef.vn", "https://a", "https://A-b.C0/x:y@z/~_!$&'()*+,;=", "https://./", "https://-//"}
	rejected := []string{"HTTPS://cafef.vn/a", "https://", "https:///a", "https://:443/a", "https://a.b:80/", "https://a b/", "https://a.b/a b",
		"https://a.b/%20", "https://a.b/?q", "https://a.b/#f", "https://u@a.b/", "https://[::1]/", "https://a_b.c/", "https://a.b/é",
		"https://a.b/\x7f", "ftp://a.b/", "http:a.b", "https//a.b", ""}
	for _, s := range accepted {
		if !plainHTTPURL([]byte(s)) {
			t.Errorf("plainHTTPURL(%q) = false", s)
		}
	}
	for _, s := range rejected {
		if plainHTTPURL([]byte(s)) {
			t.Errorf("plainHTTPURL(%q) = true", s)
		}
	}
	// Whatever the fast path accepts, checkURL accepts.
	alphabet := "aZ09.-_~/:@!$&'()*+,;=%?#[] \x00\x7f\xc3\xa9"
	x := uint64(7)
	for i := 0; i < 200000; i++ {
		b := []byte([]string{"http://", "https://"}[i%2])
		for n := int(x % 12); n >= 0; n-- {
			x = x*6364136223846793005 + 1442695040888963407
			b = append(b, alphabet[x>>33%uint64(len(alphabet))])
		}
		if plainHTTPURL(b) {
			if err := checkURL(string(b)); err != nil {
				t.Fatalf("plainHTTPURL(%q) = true, checkURL: %v", b, err)
			}
		}
	}
	for _, s := range append(accepted, rejected...) {
		if plainHTTPURL([]byte(s)) && checkURL(s) != nil {
			t.Errorf("plainHTTPURL(%q) = true, checkURL: %v", s, checkURL(s))
		}
	}
}

// TestInvalidText: record values are UTF-8 JSON (docs/topics.md). A string the
// pipeline reads that is not valid UTF-8, or that escapes half of a
// surrogate pair, cannot be decoded to text: decode_error, whatever rule
// reads it, instead of being stored with U+FFFD in its place (which could
// also pass sa.text's length check, or merge two different urls into one
// key). language stays never a failure: such a language is "unknown".
func TestInvalidText(t *testing.T) {
	t.Parallel()
	// with marshals the envelope with placeholder QQQQ in a string, then
	// puts the raw JSON text rep in its place (json.Marshal would repair
	// invalid UTF-8).
	with := func(taskType string, base map[string]any, field, value, rep string) []byte {
		over := map[string]any{field: value}
		if field == "symbols" {
			over[field] = []string{value}
		}
		return []byte(strings.Replace(string(envelope(t, taskType, base, over, nil)), "QQQQ", rep, 1))
	}
	dec := stages.ReasonDecodeError
	cases := []struct {
		name   string
		value  []byte
		reason stages.Reason
		rule   string
		check  func(*testing.T, Row)
	}{
		{name: "ta symbol", value: with(TaskTA, taBase(), "symbol", "VNQQQQ", "\xff"), reason: dec},
		{name: "ta currency", value: with(TaskTA, taBase(), "currency", "USQQQQ", "\xc3"), reason: dec},
		{name: "ta source", value: with(TaskTA, taBase(), "source", "hQQQQse", "\xed\xa0\x80"), reason: dec},
		{name: "ta trade_date", value: with(TaskTA, taBase(), "trade_date", "2025-06-0QQQQ", "\xff"), reason: dec},
		{name: "sa url", value: with(TaskSA, saBase(), "url_canonical", "https://cafef.vn/QQQQ", "\xff"), reason: dec},
		{name: "sa url lone surrogate", value: with(TaskSA, saBase(), "url_canonical", "https://cafef.vn/QQQQ", `\ud800`), reason: dec},
		{name: "sa text padded by invalid bytes", value: with(TaskSA, saBase(), "text_normalized", strings.Repeat("a", 80)+"QQQQ", strings.Repeat("\xff", 40)), reason: dec},
		{name: "sa text lone low surrogate", value: with(TaskSA, saBase(), "text_normalized", strings.Repeat("a", 130)+"QQQQ", `\udc00`), reason: dec},
		{name: "sa text high surrogate then other escape", value: with(TaskSA, saBase(), "text_normalized", strings.Repeat("a", 130)+"QQQQ", `\ud83d\n`), reason: dec},
		{name: "sa text surrogate pair", value: with(TaskSA, saBase(), "text_normalized", strings.Repeat("a", 119)+"QQQQ", `\ud83d\ude00`), check: func(t *testing.T, r Row) {
			if want := strings.Repeat("a", 119) + "😀"; *r.SA.TextNormalized != want {
				t.Errorf("text = %q", *r.SA.TextNormalized)
			}
		}},
		{name: "sa text escaped replacement character is text", value: with(TaskSA, saBase(), "text_normalized", strings.Repeat("a", 119)+"QQQQ", `\ufffd`)},
		{name: "sa publisher_time", value: with(TaskSA, saBase(), "publisher_time", "2025-06-01T19:00:00QQQQ", "\xff"), reason: dec},
		{name: "sa content_hash", value: with(TaskSA, saBase(), "content_hash", "QQQQ", `\ud800`), reason: dec},
		{name: "sa symbols element", value: with(TaskSA, saBase(), "symbols", "VNQQQQ", "\xff"), reason: dec},
		{name: "sa title", value: with(TaskSA, saBase(), "title", "tQQQQ", "\xe1\xbb"), reason: dec},
		{name: "sa source_domain", value: with(TaskSA, saBase(), "source_domain", "cafef.vQQQQ", "\xff"), reason: dec},
		{name: "sa language is unknown, not a failure", value: with(TaskSA, saBase(), "language", "vQQQQ", "\xff"), check: func(t *testing.T, r Row) {
			if *r.SA.Language != LanguageUnknown {
				t.Errorf("language = %q", *r.SA.Language)
			}
		}},
		{name: "earlier rule failure wins", value: with(TaskSA, map[string]any{"url_canonical": "ftp://x", "source_domain": "d"}, "title", "QQQQ", "\xff"), reason: sanity, rule: RuleSAURL},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			row, err := process(tc.value, time.Time{})
			wantClass(t, err, tc.reason, tc.rule)
			if err == nil && tc.check != nil {
				tc.check(t, row)
			}
		})
	}
}
