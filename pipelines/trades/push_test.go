package trades_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/trades"
)

// corpus is a push's trades: three good ones (numbers and decimal strings,
// a missing fee) and one failing each per-trade rule.
var corpus = []string{
	`{"id":"g1","symbol":"btc-usd","side":"buy","qty":"0.5","price":42000,"fee":"1.5","ts":"2025-01-02T10:00:00Z"}`,
	`{"id":77,"symbol":"ETH/USD","side":"SELL","qty":2,"price":"3000.25","ts":"2025-01-02T11:00:00.5Z"}`,
	`{"id":"g3","symbol":"SOL","side":"Buy","qty":"10","price":"150","fee":0,"ts":"2025-01-03T00:00:00+02:00"}`,
	`{"id":"","symbol":"BTC-USD","side":"BUY","qty":1,"price":1,"ts":"2025-01-02T10:00:00Z"}`,
	`{"id":"b-sym","symbol":"BTC USD","side":"BUY","qty":1,"price":1,"ts":"2025-01-02T10:00:00Z"}`,
	`{"id":"b-side","symbol":"BTC-USD","side":"HOLD","qty":1,"price":1,"ts":"2025-01-02T10:00:00Z"}`,
	`{"id":"b-qty","symbol":"BTC-USD","side":"BUY","qty":"0","price":1,"ts":"2025-01-02T10:00:00Z"}`,
	`{"id":"b-price","symbol":"BTC-USD","side":"BUY","qty":1,"price":"-1","ts":"2025-01-02T10:00:00Z"}`,
	`{"id":"b-fee","symbol":"BTC-USD","side":"BUY","qty":1,"price":1,"fee":"-0.1","ts":"2025-01-02T10:00:00Z"}`,
	`{"id":"b-ts","symbol":"BTC-USD","side":"BUY","qty":1,"price":1,"ts":"yesterday"}`,
	`{"id":"b-future","symbol":"BTC-USD","side":"BUY","qty":1,"price":1,"ts":"2999-01-01T00:00:00Z"}`,
}

// corpusRejects are the ext ids (as push ids name them) and rules of the
// corpus's bad trades.
var corpusRejects = map[string]string{
	"item-3": trades.RuleTradeID, "b-sym": trades.RuleSymbol, "b-side": trades.RuleSide, "b-qty": trades.RuleQty,
	"b-price": trades.RulePrice, "b-fee": trades.RuleFee, "b-ts": trades.RuleTS, "b-future": trades.RuleTS,
}

func pushCmd(user, pushID string, items []string) trades.PushCommand {
	return trades.PushCommand{UserID: user, Broker: trades.BrokerCoinbase, PushID: pushID, Trades: json.RawMessage("[" + strings.Join(items, ",") + "]")}
}

type tradeRow struct {
	ID, ExtID, Symbol, Side, Qty, Price, Fee, ImportID string
	TS                                                 time.Time
	UpdatedAt                                          time.Time
}

func (f *importFixture) rows(t *testing.T, user string) []tradeRow {
	t.Helper()
	rs, err := f.pg.Pool.Query(context.Background(), `SELECT id::text, ext_id, symbol, side, qty::text, price::text, fee::text, import_id, ts, updated_at
		FROM trades WHERE user_id = $1 ORDER BY ext_id`, user)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []tradeRow
	for rs.Next() {
		var r tradeRow
		if err := rs.Scan(&r.ID, &r.ExtID, &r.Symbol, &r.Side, &r.Qty, &r.Price, &r.Fee, &r.ImportID, &r.TS, &r.UpdatedAt); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// pushScenario: a push of the corpus stores exactly its good trades and
// their events, and re-sends each bad trade as a one-trade push that is
// dead-lettered with its rule; the same push again is deduped, and the
// same trades under another push id change no row and repeat the same
// trade.upserted ids.
func pushScenario(t *testing.T, f *importFixture) {
	user := "pusher"
	first := pushCmd(user, "batch-1", corpus)
	f.send(t, user, first)
	evs := f.waitEvents(t, trades.TypeImportCompleted, 1)
	dl := f.waitDLQ(t, len(corpusRejects))

	rows := f.rows(t, user)
	got := make([]string, len(rows))
	for i, r := range rows {
		got[i] = fmt.Sprintf("%s %s %s %s %s %s %s %s", r.ExtID, r.Symbol, r.Side, r.Qty, r.Price, r.Fee, r.TS.UTC().Format(time.RFC3339Nano), r.ImportID)
		if r.ID != trades.TradeID(user, trades.BrokerCoinbase, r.ExtID) {
			t.Fatalf("row %s has id %s", r.ExtID, r.ID)
		}
	}
	id := first.ImportID()
	want := []string{
		"77 ETH/USD SELL 2 3000.25 0 2025-01-02T11:00:00.5Z " + id,
		"g1 BTC-USD BUY 0.5 42000 1.5 2025-01-02T10:00:00Z " + id,
		"g3 SOL BUY 10 150 0 2025-01-02T22:00:00Z " + id,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	done := ofType[trades.ImportCompleted](t, evs, trades.TypeImportCompleted)
	if len(done) != 1 || done[0].ImportID != id || done[0].Pages != 1 || done[0].Fetched != 11 || done[0].Stored != 3 || done[0].Rejected != 8 {
		t.Fatalf("import.completed %+v", done)
	}
	// A push's since is its earliest stored trade's UTC date, which
	// trades-score accepts: without it the push was never scored.
	if done[0].Since != "2025-01-02" {
		t.Fatalf("import.completed since %q, want 2025-01-02 (the earliest good trade's date)", done[0].Since)
	}
	var upserted []string
	for _, e := range evs {
		if e.Type == trades.TypeTradeUpserted {
			upserted = append(upserted, e.EventID)
		}
	}
	if len(upserted) != 3 {
		t.Fatalf("%d trade.upserted, want 3", len(upserted))
	}

	rejects := map[string]string{}
	for _, r := range dl {
		c, err := trades.DecodeCommand(r.Key, r.Value)
		if err != nil || c.Kind != trades.KindPush {
			t.Fatalf("dead letter %s is not a push: %v", r.Value, err)
		}
		items, err := c.Push.Validate(string(r.Key))
		ext, ok := strings.CutPrefix(c.Push.PushID, "dlq-"+id+"-")
		if err != nil || len(items) != 1 || !ok || string(r.Key) != user {
			t.Fatalf("dead letter push %s: %v", r.Value, err)
		}
		if header(r, "dlq.reason") != "sanity_fail" || header(r, "dlq.stage") != trades.ImportName || header(r, "dlq.source.topic") != f.cfg.ImportTopic {
			t.Fatalf("dead letter of %s: headers %v", ext, r.Headers)
		}
		rejects[ext] = header(r, "dlq.rule")
	}
	if len(rejects) != len(corpusRejects) {
		t.Fatalf("rejects %v, want %v", rejects, corpusRejects)
	}
	for ext, rule := range corpusRejects {
		if rejects[ext] != rule {
			t.Fatalf("rejects %v, want %v", rejects, corpusRejects)
		}
	}

	// The same push again: deduped, nothing new.
	f.send(t, user, first)
	// The same trades under another push id: a new run, no row changed.
	second := pushCmd(user, "batch-2", corpus)
	f.send(t, user, second)
	evs = f.waitEvents(t, trades.TypeImportCompleted, 2)
	f.waitDLQ(t, 2*len(corpusRejects))
	if again := f.rows(t, user); !slices.Equal(again, rows) {
		t.Fatalf("rows changed by an identical push:\n%+v\nwant\n%+v", again, rows)
	}
	var ups2 []string
	for _, e := range evs {
		if e.Type == trades.TypeTradeUpserted {
			ups2 = append(ups2, e.EventID)
		}
	}
	if len(ups2) != 6 || !slices.Equal(ups2[:3], upserted) || !slices.Equal(ups2[3:], upserted) {
		t.Fatalf("trade.upserted ids %v, want %v twice", ups2, upserted)
	}
	if d := ofType[trades.ImportCompleted](t, evs, trades.TypeImportCompleted); d[1].ImportID != second.ImportID() {
		t.Fatalf("second completion %+v, want the second push's (the repeated first push is deduped)", d[1])
	}
}

func TestPushCorpus(t *testing.T) {
	t.Parallel()
	f := newImportFixture(t, false, nil)
	f.start(t)
	pushScenario(t, f)
	for outcome, want := range map[string]float64{"started": 2, "completed": 2, "deduped": 1, "failed": 0} {
		if got := f.metric(t, "sluice_trades_imports_total", "outcome", outcome); got != want {
			t.Errorf("imports_total{%s} = %v, want %v", outcome, got, want)
		}
	}
	if got := f.metric(t, "sluice_trades_trades_total", "broker", "coinbase", "result", "rejected"); got != 16 {
		t.Errorf("trades_total{rejected} = %v, want 16 (8 a push, the dead-lettered carriers not counted again)", got)
	}
}

// badInputs sends one record per failure of trades-import and checks that
// each lands in trades.dlq with its reason and rule, dlq.stage the
// service.
func badInputsScenario(t *testing.T, f *importFixture, key *trades.TokenSealer) {
	many := make([]string, trades.MaxPushTrades+1)
	for i := range many {
		many[i] = "{}"
	}
	type bad struct {
		key, value   string
		reason, rule string
	}
	imp := func(user, since, broker string) string {
		b, _ := json.Marshal(importCmd(user, since, broker, false, nil))
		return string(b)
	}
	cases := []bad{
		{"k-json", `{"kind":`, "decode_error", ""},
		{"k-utf8", "\xff\xfe", "decode_error", ""},
		{"k-nokind", `{"user_id":"k-nokind"}`, "unknown_task_type", ""},
		{"k-kind", `{"kind":"zap","user_id":"k-kind"}`, "unknown_task_type", ""},
		{"a@b.com", imp("a@b.com", since, "synthetic"), "sanity_fail", trades.RuleUserID},
		{"k-other", imp("k-key", since, "synthetic"), "sanity_fail", trades.RuleKey},
		{"k-since", imp("k-since", "2999-01-01", "synthetic"), "sanity_fail", trades.RuleSince},
		{"k-since2", imp("k-since2", "last week", "synthetic"), "sanity_fail", trades.RuleSince},
		{"k-broker", imp("k-broker", since, "kraken"), "sanity_fail", trades.RuleBroker},
		{"k-conn", imp("k-conn", since, "binance"), "sanity_fail", trades.RuleBrokerConnection},
		{"k-auth", imp("k-auth", since, "coinbase"), "sanity_fail", trades.RuleBrokerAuth},
		{"k-push1", `{"kind":"push","user_id":"k-push1","broker":"synthetic","trades":[]}`, "sanity_fail", trades.RulePush},
		{"k-push2", `{"kind":"push","user_id":"k-push2","broker":"synthetic","push_id":"p","trades":{"id":1}}`, "sanity_fail", trades.RulePush},
		{"k-push3", `{"kind":"push","user_id":"k-push3","broker":"synthetic","push_id":"p","trades":[` + strings.Join(many, ",") + `]}`, "sanity_fail", trades.RulePush},
		{"k-page", `{"kind":"page","user_id":"k-page","import_id":"x"}`, "decode_error", ""},
		{"k-fetch", mustJSON(importCmd("k-fetch", since, "synthetic", false, &trades.SyntheticOptions{Trades: 20, PageSize: 10, FailPage: 2, FailTimes: 99})), "retries_exhausted", trades.RuleBrokerFetch},
		{"k-pg", mustJSON(pushCmd("k-pg", "nul", []string{corpus[0], `{"id":"nul\u0000id","symbol":"BTC-USD","side":"BUY","qty":1,"price":1,"ts":"2025-01-02T10:00:00Z"}`})), "sink_rejected", "pg.22021"},
		{"k-trade", `{"kind":"push","user_id":"k-trade","broker":"synthetic","push_id":"one","trades":[{"id":"t","symbol":"BTC-USD","side":"BUY","qty":-1,"price":1,"ts":"2025-01-02T10:00:00Z"}]}`, "sanity_fail", trades.RuleQty},
	}
	f.connect(t, key, "k-auth", trades.BrokerCoinbase, "tok-k-auth", true)
	before := len(f.k.ReadTopic(t, f.cfg.DLQTopic, testkit.ReadCommitted()))
	keys := map[string]bool{}
	for _, c := range cases {
		keys[c.key] = true
		f.send(t, c.key, []byte(c.value))
	}
	var dl []*kgo.Record
	for _, r := range f.waitDLQ(t, before+len(cases)) {
		if keys[string(r.Key)] {
			dl = append(dl, r)
		}
	}
	got := map[string]string{}
	for _, r := range dl {
		if header(r, "dlq.stage") != trades.ImportName {
			t.Fatalf("dead letter of %s: dlq.stage %q", r.Key, header(r, "dlq.stage"))
		}
		got[string(r.Key)] = header(r, "dlq.reason") + " " + header(r, "dlq.rule")
	}
	for _, c := range cases {
		if want := c.reason + " " + c.rule; got[c.key] != want {
			t.Errorf("dead letter of %s: %q, want %q", c.key, got[c.key], want)
		}
	}
	if len(dl) != len(cases) {
		t.Errorf("%d dead letters, want %d", len(dl), len(cases))
	}
	evs := f.waitEvents(t, trades.TypeImportFailed, 4)
	failed := map[string]string{}
	for _, p := range ofType[trades.ImportFailed](t, evs, trades.TypeImportFailed) {
		failed[p.ImportID] = p.Reason + " " + p.Rule
	}
	for user, want := range map[string]string{
		importCmd("k-conn", since, "binance", false, nil).ImportID():  "sanity_fail " + trades.RuleBrokerConnection,
		importCmd("k-auth", since, "coinbase", false, nil).ImportID(): "sanity_fail " + trades.RuleBrokerAuth,
		trades.ImportID("k-fetch", since, "synthetic"):                "retries_exhausted " + trades.RuleBrokerFetch,
		trades.PushImportID("k-pg", "nul"):                            "sink_rejected pg.22021",
	} {
		if failed[user] != want {
			t.Errorf("import.failed of %s: %q, want %q (all: %v)", user, failed[user], want, failed)
		}
	}
	if n := f.rowCount(t, "k-pg"); n != 0 {
		t.Errorf("k-pg has %d rows: the failed transaction must store none", n)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestBadInputsDeadLettered(t *testing.T) {
	t.Parallel()
	key, err := trades.ParseTokenKey(testTokenKey)
	if err != nil {
		t.Fatal(err)
	}
	_, srv := newFakeCoinbase(t, "another-token", 1) // answers k-auth's token with 401
	f := newImportFixture(t, false, func(c *trades.ImportConfig) {
		c.TokenKey = key
		c.CoinbaseURL = srv.URL
	})
	f.start(t)
	badInputsScenario(t, f, key)
}

// TestIntegrationRealStack runs the push corpus, a synthetic import of 500
// trades and every bad input on a real broker (KAFKA_BROKERS) and
// PostgreSQL (DATABASE_URL, else the local server of TestMain), on its own
// topics, group and schema.
func TestIntegrationRealStack(t *testing.T) {
	if os.Getenv("KAFKA_BROKERS") == "" {
		t.Skip("KAFKA_BROKERS is not set (this test needs a real broker)")
	}
	t.Parallel()
	key, err := trades.ParseTokenKey(testTokenKey)
	if err != nil {
		t.Fatal(err)
	}
	_, srv := newFakeCoinbase(t, "another-token", 1)
	f := newImportFixture(t, true, func(c *trades.ImportConfig) {
		c.TokenKey = key
		c.CoinbaseURL = srv.URL
	})
	f.start(t)
	pushScenario(t, f)

	cmd := importCmd("bulk", since, trades.BrokerSynthetic, false, nil)
	f.send(t, "bulk", cmd)
	evs := f.waitEvents(t, trades.TypeImportCompleted, 3)
	var done *trades.ImportCompleted
	for _, p := range ofType[trades.ImportCompleted](t, evs, trades.TypeImportCompleted) {
		if p.ImportID == cmd.ImportID() {
			done = &p
		}
	}
	if done == nil || done.Pages != 5 || done.Fetched != 500 || done.Stored != 500 || done.Rejected != 0 {
		t.Fatalf("import.completed of the synthetic import: %+v", done)
	}
	if n := f.rowCount(t, "bulk"); n != 500 {
		t.Fatalf("%d rows, want 500", n)
	}
	badInputsScenario(t, f, key)
}
