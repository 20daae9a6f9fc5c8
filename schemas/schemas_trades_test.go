package schemas_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/schemas"
)

// Records of the trades pipeline as its encoders write them (taken from a
// run, see pipelines/trades' TestRecordsMatchSchemas) and the examples its
// tests use.
const (
	tradeFields = `"trade_id":"3aca7316-20fa-5af5-b34a-a0fc8e259e9c","user_id":"u3","broker":"synthetic","ext_id":"2",` +
		`"symbol":"BTC-USD","side":"SELL","qty":"0.5","price":"90","fee":"0.125","ts":"2026-11-26T09:37:27.778597Z"`
	scoredSell = `{` + tradeFields + `,"realized_pnl":"-5.17500000","lot_labels":["overtrading"],"labels":[],` +
		`"lots":[{"qty":"0.5","pnl":"-5.17500000","labels":["overtrading"]}]}`
	envelope  = `"event_id":"e-1","timestamp":"2026-11-26T09:40:00.123Z",`
	agg       = `{"trades":3,"buys":2,"sells":1,"notional":"1545.05000000","fees":"0.12500000","realized_pnl":"-5.17500000","counts_by_label":{"revenge_trading":1},"pnl_by_label":{"unlabelled":"-5.17500000"},"biased_trade_share":0.3333,"streaks":{"longest_win":0,"longest_loss":1},"top_insight":null}`
	importCmd = `{"kind":"import","user_id":"u1","since":"2025-05-01","broker":"synthetic","force":true,` +
		`"options":{"trades":50,"page_size":10,"fail_page":2,"fail_times":3,"http429_page":3,"retry_after_ms":20,"exhaust_page":4,"reset_ms":30,"page_latency_ms":5}}`
	importState = `{"import_id":"9f2c","user_id":"u1","kind":"import","broker":"synthetic","since":"2026-11-24","options":{"trades":30,"page_size":12,"exhaust_page":1,"reset_ms":10},` +
		`"run_id":"r-1","status":"RUNNING","page":1,"cursor":"12","chain_offset":4,"fetched":12,"stored":12,"rejected":0,"reset_ms":10,` +
		`"not_before":"2026-11-26T10:00:00.26Z","started_at":"2026-11-26T10:00:00Z","updated_at":"2026-11-26T10:00:00.1Z"}`
)

func event(typ, payload string) string {
	return `{` + envelope + `"type":"` + typ + `","payload":` + payload + `}`
}

func TestValidateTradesTable(t *testing.T) {
	t.Parallel()
	set, err := schemas.Compile()
	if err != nil {
		t.Fatal(err)
	}
	raw := `{"id":"p1","symbol":"btc-usd","side":"buy","qty":"0.50000000","price":100.1,"ts":"2026-11-26T09:32:27.778597Z"}`
	checkCases(t, set, []validateCase{
		// commands
		{schemas.TradesCommand, "import (commands_test)", importCmd, nil},
		{schemas.TradesCommand, "import since RFC 3339", `{"kind":"import","user_id":"u.1-x","since":"2025-05-01T00:00:00Z","broker":"coinbase"}`, nil},
		{schemas.TradesCommand, "push", `{"kind":"push","user_id":"u3","broker":"synthetic","push_id":"push-1","trades":[` + raw +
			`,{"id":2,"symbol":"BTC-USD","side":"SELL","qty":0.5,"price":"9e1","fee":null,"ts":"2026-11-26T09:37:27Z"}]}`, nil},
		{schemas.TradesCommand, "page (commands_test)", `{"kind":"page","user_id":"u1","import_id":"i","run_id":"r","page":2,"cursor":"c2","not_before":"2025-06-01T20:00:01Z"}`, nil},
		{schemas.TradesCommand, "missing kind", `{"user_id":"u1"}`, []string{"/kind"}},
		{schemas.TradesCommand, "unknown kind", `{"kind":"export"}`, []string{"/kind"}},
		{schemas.TradesCommand, "kind upper case", `{"kind":"IMPORT","user_id":"u1","since":"2025-05-01","broker":"synthetic"}`, []string{"/kind"}},
		{schemas.TradesCommand, "import missing since", `{"kind":"import","user_id":"u1","broker":"synthetic"}`, []string{"/since"}},
		{schemas.TradesCommand, "user_id an e-mail", `{"kind":"import","user_id":"a@b.c","since":"2025-05-01","broker":"synthetic"}`, []string{"/user_id"}},
		{schemas.TradesCommand, "unknown broker", `{"kind":"import","user_id":"u1","since":"2025-05-01","broker":"kraken"}`, []string{"/broker"}},
		// A value failing both alternatives of an anyOf (date, date-time;
		// number, decimal string) is reported once per alternative.
		{schemas.TradesCommand, "since not a date", `{"kind":"import","user_id":"u1","since":"yesterday","broker":"synthetic"}`, []string{"/since", "/since"}},
		{schemas.TradesCommand, "force not a bool", `{"kind":"import","user_id":"u1","since":"2025-05-01","broker":"synthetic","force":"yes"}`, []string{"/force"}},
		{schemas.TradesCommand, "options not an object", `{"kind":"import","user_id":"u1","since":"2025-05-01","broker":"synthetic","options":[1]}`, []string{"/options"}},
		{schemas.TradesCommand, "push without push_id", `{"kind":"push","user_id":"u1","broker":"synthetic","trades":[]}`, []string{"/push_id"}},
		{schemas.TradesCommand, "push trades not an array", `{"kind":"push","user_id":"u1","broker":"synthetic","push_id":"p","trades":{"id":1}}`, []string{"/trades"}},
		{schemas.TradesCommand, "push of 1001 trades", `{"kind":"push","user_id":"u1","broker":"synthetic","push_id":"p","trades":[` +
			strings.TrimSuffix(strings.Repeat(raw+",", 1001), ",") + `]}`, []string{"/trades"}},
		{schemas.TradesCommand, "pushed trade without ts", `{"kind":"push","user_id":"u1","broker":"synthetic","push_id":"p","trades":[{"id":"a","symbol":"X","side":"BUY","qty":1,"price":1}]}`, []string{"/trades/0/ts"}},
		{schemas.TradesCommand, "page without run_id", `{"kind":"page","user_id":"u1","import_id":"i","page":1}`, []string{"/run_id"}},
		{schemas.TradesCommand, "page 0", `{"kind":"page","user_id":"u1","import_id":"i","run_id":"r","page":0}`, []string{"/page"}},
		{schemas.TradesCommand, "page not_before malformed", `{"kind":"page","user_id":"u1","import_id":"i","run_id":"r","page":1,"not_before":"soon"}`, []string{"/not_before"}},

		// raw trades
		{schemas.TradesRawTrade, "numbers and decimal strings", raw, nil},
		{schemas.TradesRawTrade, "integer id, exponent", `{"id":7,"symbol":"X","side":"SELL","qty":"1e-3","price":"+2.","fee":"0","ts":"2026-11-26T09:32:27+07:00"}`, nil},
		{schemas.TradesRawTrade, "qty not a decimal", `{"id":"a","symbol":"X","side":"BUY","qty":"NaN","price":1,"ts":"2026-11-26T09:32:27Z"}`, []string{"/qty", "/qty"}},
		{schemas.TradesRawTrade, "id an object", `{"id":{},"symbol":"X","side":"BUY","qty":1,"price":1,"ts":"2026-11-26T09:32:27Z"}`, []string{"/id"}},
		{schemas.TradesRawTrade, "missing price", `{"id":"a","symbol":"X","side":"BUY","qty":1,"ts":"2026-11-26T09:32:27Z"}`, []string{"/price"}},

		// import state
		{schemas.TradesImportState, "running with a rate-limit wait", importState, nil},
		{schemas.TradesImportState, "failed push", `{"import_id":"a1","user_id":"u3","kind":"push","broker":"binance","since":"2026-11-26","run_id":"r","status":"FAILED","page":0,"chain_offset":0,"fetched":0,"stored":0,"rejected":0,"reason":"retries_exhausted","rule":"trades.broker_fetch","error":"503","started_at":"2026-11-26T10:00:00Z","updated_at":"2026-11-26T10:00:00Z","completed_at":"2026-11-26T10:00:00Z"}`, nil},
		{schemas.TradesImportState, "unknown status", strings.Replace(importState, `"RUNNING"`, `"DONE"`, 1), []string{"/status"}},
		{schemas.TradesImportState, "page kind", strings.Replace(importState, `"kind":"import"`, `"kind":"page"`, 1), []string{"/kind"}},
		{schemas.TradesImportState, "fetched a string", strings.Replace(importState, `"fetched":12`, `"fetched":"12"`, 1), []string{"/fetched"}},
		{schemas.TradesImportState, "missing run_id", strings.Replace(importState, `"run_id":"r-1",`, ``, 1), []string{"/run_id"}},
		{schemas.TradesImportState, "bad reason", strings.Replace(importState, `"status"`, `"reason":"oops","status"`, 1), []string{"/reason"}},

		// events
		{schemas.TradesEvent, "missing type", `{` + envelope + `"payload":{}}`, []string{"/type"}},
		{schemas.TradesEvent, "unknown type", event("trade.deleted", `{}`), []string{"/type"}},
		{schemas.TradesEvent, "payload checked by type", event("import.progress", `{"import_id":"i"}`),
			[]string{"/payload/fetched", "/payload/page", "/payload/percent", "/payload/rejected", "/payload/run_id", "/payload/stored"}},
		{schemas.TradesEvent, "timestamp not RFC 3339", `{"event_id":"e","type":"score.request","timestamp":"now","payload":{"user_id":"u1","since":"2025-01-01"}}`, []string{"/timestamp"}},
		{schemas.TradesTradeUpserted, "valid", event("trade.upserted", `{`+tradeFields+`,"import_id":"i-1"}`), nil},
		{schemas.TradesTradeUpserted, "wrong type", event("trade.scored", `{`+tradeFields+`,"import_id":"i-1"}`), []string{"/payload/labels", "/payload/lot_labels", "/payload/lots", "/payload/realized_pnl", "/type"}},
		{schemas.TradesTradeUpserted, "qty a number", event("trade.upserted", `{`+strings.Replace(tradeFields, `"qty":"0.5"`, `"qty":0.5`, 1)+`,"import_id":"i"}`), []string{"/payload/qty"}},
		{schemas.TradesTradeUpserted, "qty with a trailing zero", event("trade.upserted", `{`+strings.Replace(tradeFields, `"qty":"0.5"`, `"qty":"0.50"`, 1)+`,"import_id":"i"}`), []string{"/payload/qty"}},
		{schemas.TradesTradeUpserted, "side lower case", event("trade.upserted", `{`+strings.Replace(tradeFields, `"SELL"`, `"sell"`, 1)+`,"import_id":"i"}`), []string{"/payload/side"}},
		{schemas.TradesTradeUpserted, "trade_id not a uuid", event("trade.upserted", `{`+strings.Replace(tradeFields, `3aca7316-20fa-5af5-b34a-a0fc8e259e9c`, `t-1`, 1)+`,"import_id":"i"}`), []string{"/payload/trade_id"}},
		{schemas.TradesImportProgress, "valid", event("import.progress", `{"import_id":"i","run_id":"r","page":1,"percent":50,"fetched":12,"stored":11,"rejected":1}`), nil},
		{schemas.TradesImportProgress, "percent above 100", event("import.progress", `{"import_id":"i","run_id":"r","page":1,"percent":101,"fetched":12,"stored":11,"rejected":1}`), []string{"/payload/percent"}},
		{schemas.TradesImportCompleted, "valid", event("import.completed", `{"import_id":"i","run_id":"r","user_id":"u1","since":"2025-01-01","pages":5,"fetched":500,"stored":500,"rejected":0}`), nil},
		{schemas.TradesImportCompleted, "pages negative", event("import.completed", `{"import_id":"i","run_id":"r","user_id":"u1","since":"2025-01-01","pages":-1,"fetched":500,"stored":500,"rejected":0}`), []string{"/payload/pages"}},
		{schemas.TradesImportFailed, "valid", event("import.failed", `{"import_id":"i","run_id":"r","reason":"sanity_fail","rule":"trades.broker_connection"}`), nil},
		{schemas.TradesImportFailed, "bad reason", event("import.failed", `{"import_id":"i","run_id":"r","reason":"boom","rule":""}`), []string{"/payload/reason"}},
		{schemas.TradesScoreRequest, "valid", event("score.request", `{"user_id":"u1","since":"2025-01-01"}`), nil},
		{schemas.TradesScoreRequest, "missing since", event("score.request", `{"user_id":"u1"}`), []string{"/payload/since"}},
		{schemas.TradesTradeScored, "a SELL with its lots", event("trade.scored", scoredSell), nil},
		{schemas.TradesTradeScored, "P/L with 2 digits", event("trade.scored", strings.Replace(scoredSell, `"realized_pnl":"-5.17500000"`, `"realized_pnl":"-5.18"`, 1)), []string{"/payload/realized_pnl"}},
		{schemas.TradesTradeScored, "missing realized_pnl", event("trade.scored", strings.Replace(scoredSell, `"realized_pnl":"-5.17500000",`, ``, 1)), []string{"/payload/realized_pnl"}},
		{schemas.TradesTradeScored, "unknown label", event("trade.scored", strings.Replace(scoredSell, `"labels":[]`, `"labels":["fomo"]`, 1)), []string{"/payload/labels/0"}},
		{schemas.TradesTradeScored, "lot without pnl", event("trade.scored", strings.Replace(scoredSell, `"pnl":"-5.17500000",`, ``, 1)), []string{"/payload/lots/0/pnl"}},
		{schemas.TradesDigestRequest, "valid", event("digest.request", `{"user_id":"u1","period_start":"2025-01-06"}`), nil},
		{schemas.TradesDigestRequest, "period_start an ISO week", event("digest.request", `{"user_id":"u1","period_start":"2025-W02"}`), []string{"/payload/period_start"}},
		{schemas.TradesCoachReflect, "valid", event("coach.reflect", `{"trade_id":"3aca7316-20fa-5af5-b34a-a0fc8e259e9c","labels":[{"name":"overtrading","confidence":0.55}],"insight":"Slow down.","sparkline":[],"tone":"supportive"}`), nil},
		{schemas.TradesCoachReflect, "bad tone", event("coach.reflect", `{"trade_id":"3aca7316-20fa-5af5-b34a-a0fc8e259e9c","labels":[{"name":"overtrading","confidence":0.55}],"insight":"","sparkline":[1.5],"tone":"harsh"}`), []string{"/payload/tone"}},
		{schemas.TradesCoachReflect, "confidence above 1", event("coach.reflect", `{"trade_id":"3aca7316-20fa-5af5-b34a-a0fc8e259e9c","labels":[{"name":"overtrading","confidence":1.5}],"insight":"","sparkline":[],"tone":"strict"}`), []string{"/payload/labels/0/confidence"}},
		{schemas.TradesCoachReflect, "no labels", event("coach.reflect", `{"trade_id":"3aca7316-20fa-5af5-b34a-a0fc8e259e9c","labels":[],"insight":"","sparkline":[],"tone":"strict"}`), []string{"/payload/labels"}},
		{schemas.TradesDigestReady, "valid", event("digest.ready", `{"digest_id":1,"user_id":"u1","period":{"start":"2025-01-06","end":"2025-01-13"},"revision":1,"object_key":"digests/u1/2025-01-06-2025-01-13.json","partial":true}`), nil},
		{schemas.TradesDigestReady, "period end missing", event("digest.ready", `{"digest_id":1,"user_id":"u1","period":{"start":"2025-01-06"},"revision":1,"object_key":"k","partial":false}`), []string{"/payload/period/end"}},
		{schemas.TradesDigestReady, "revision 0", event("digest.ready", `{"digest_id":1,"user_id":"u1","period":{"start":"2025-01-06","end":"2025-01-13"},"revision":0,"object_key":"k","partial":false}`), []string{"/payload/revision"}},

		// digest store and object
		{schemas.TradesDigestState, "window", `{"revision":2,"emitted_revision":1,"last_change":"2026-11-26T10:00:00Z","emitted_agg":"ab12","emitted_partial":true}`, nil},
		{schemas.TradesDigestState, "window publishing", `{"revision":1,"emitted_revision":1,"last_change":"2026-11-26T10:00:00.5Z","emitted_agg":"ab12","publishing":true,"publish_mark":"2026-11-26T10:00:01.000000005Z"}`, nil},
		{schemas.TradesDigestState, "window without last_change", `{"revision":2,"emitted_revision":1}`, []string{"/last_change"}},
		{schemas.TradesDigestState, "last_change not UTC", `{"revision":2,"emitted_revision":1,"last_change":"2026-11-26T11:00:00+01:00"}`, []string{"/last_change"}},
		{schemas.TradesDigestState, "a per-trade contribution is no window state", scoredSell, []string{"", "/emitted_revision", "/last_change", "/revision"}},
		{schemas.TradesDigestObject, "valid", `{"user_id":"u3","period":{"start":"2026-11-23","end":"2026-11-30"},"revision":1,"partial":true,"agg":` + agg + `}`, nil},
		{schemas.TradesDigestObject, "top insight", `{"user_id":"u3","period":{"start":"2026-11-23","end":"2026-11-30"},"revision":1,"partial":false,"agg":` +
			strings.Replace(agg, `"top_insight":null`, `"top_insight":{"label":"revenge_trading","pnl":"-5.17500000"}`, 1) + `}`, nil},
		{schemas.TradesDigestObject, "unknown label counted", `{"user_id":"u3","period":{"start":"2026-11-23","end":"2026-11-30"},"revision":1,"partial":true,"agg":` +
			strings.Replace(agg, `{"revenge_trading":1}`, `{"fomo":1}`, 1) + `}`, []string{"/agg/counts_by_label"}},
		{schemas.TradesDigestObject, "fees a number", `{"user_id":"u3","period":{"start":"2026-11-23","end":"2026-11-30"},"revision":1,"partial":true,"agg":` +
			strings.Replace(agg, `"fees":"0.12500000"`, `"fees":0.125`, 1) + `}`, []string{"/agg/fees"}},
	})
}

func TestValidateModulesTable(t *testing.T) {
	t.Parallel()
	set, err := schemas.Compile()
	if err != nil {
		t.Fatal(err)
	}
	const state = `{"ticker":"NVDA","module":"short_interest","status":"ready","fetched_at":"2026-11-26T10:00:00Z","expires_at":"2026-11-27T10:00:00Z",` +
		`"data_date":"2026-11-15","input_hash":"ab","analysis":{"input_hash":"ab","analysis_version":1,"analyzed_at":"2026-11-26T10:00:00Z","expires_at":"2026-11-27T10:00:00Z"},` +
		`"last_error":null,"error_count":0,"lease":null,"epoch":3,"version":7,"updated_at":"2026-11-26T10:00:00.5Z"}`
	const refreshing = `{"ticker":"NVDA","module":"options_flow","status":"refreshing","fetched_at":null,"expires_at":null,"data_date":null,"input_hash":null,` +
		`"analysis":null,"last_error":null,"error_count":0,"lease":{"owner":"member-1","until":"2026-11-26T10:02:00Z"},"epoch":1,"version":1,"updated_at":"2026-11-26T10:00:00Z"}`
	checkCases(t, set, []validateCase{
		{schemas.ModulesRefresh, "as produced", `{"ticker":"NVDA","module":"options_flow","force":false,"reason":"api","job_id":"0b6f5a4e-6a0e-4b52-9a47-0d1a4a2a7f11","requested_at":"2026-11-26T10:00:00Z","request_id":"r-1"}`, nil},
		{schemas.ModulesRefresh, "minimal, lower-case ticker", `{"ticker":"nvda","module":"options_flow"}`, nil},
		{schemas.ModulesRefresh, "missing module (api_pg_test)", `{"ticker":"NVDA"}`, []string{"/module"}},
		{schemas.ModulesRefresh, "ticker a number (api_pg_test)", `{"ticker":7,"module":"options_flow"}`, []string{"/ticker"}},
		{schemas.ModulesRefresh, "force not a boolean (api_pg_test)", `{"ticker":"NVDA","module":"options_flow","force":"yes"}`, []string{"/force"}},
		{schemas.ModulesRefresh, "job_id not a uuid (api_pg_test)", `{"ticker":"NVDA","module":"options_flow","job_id":"j-1"}`, []string{"/job_id"}},
		{schemas.ModulesRefresh, "requested_at not RFC 3339", `{"ticker":"NVDA","module":"options_flow","requested_at":"now"}`, []string{"/requested_at"}},
		{schemas.ModulesState, "ready", state, nil},
		{schemas.ModulesState, "refreshing with a lease", refreshing, nil},
		{schemas.ModulesState, "error", strings.Replace(strings.Replace(state, `"status":"ready"`, `"status":"error"`, 1), `"last_error":null,"error_count":0`, `"last_error":"upstream: 503","error_count":2`, 1), nil},
		{schemas.ModulesState, "stale is not stored", strings.Replace(state, `"ready"`, `"stale"`, 1), []string{"/status"}},
		{schemas.ModulesState, "lower-case ticker", strings.Replace(state, `"NVDA"`, `"nvda"`, 1), []string{"/ticker"}},
		{schemas.ModulesState, "field left out", strings.Replace(state, `"lease":null,`, ``, 1), []string{"/lease"}},
		{schemas.ModulesState, "negative epoch", strings.Replace(state, `"epoch":3`, `"epoch":-1`, 1), []string{"/epoch"}},
		{schemas.ModulesState, "version a string", strings.Replace(state, `"version":7`, `"version":"7"`, 1), []string{"/version"}},
		{schemas.ModulesState, "data_date not a date", strings.Replace(state, `"2026-11-15"`, `"15/11/2026"`, 1), []string{"/data_date"}},
		{schemas.ModulesState, "lease without owner", strings.Replace(refreshing, `"owner":"member-1",`, ``, 1), []string{"/lease", "/lease/owner"}},
	})
}
