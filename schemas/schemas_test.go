package schemas_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/schemas"
)

func TestNamesAndCompile(t *testing.T) {
	t.Parallel()
	want := []string{
		"control.flag", "ingest.job", "ingest.task", "modules.refresh", "modules.state", "sa.article", "silver.envelope",
		"smap.analysis.finished", "smap.data.collected", "smap.event", "smap.job.completed",
		"smap.project.created", "ta.bar",
		"trades.coach.reflect", "trades.command", "trades.digest.object", "trades.digest.ready",
		"trades.digest.request", "trades.digest.state", "trades.event", "trades.import.completed",
		"trades.import.failed", "trades.import.progress", "trades.import.state", "trades.raw_trade",
		"trades.score.request", "trades.trade.scored", "trades.trade.upserted",
	}
	if got := schemas.Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	set, err := schemas.Compile()
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	for _, n := range want {
		// Every schema rejects a non-object, so every one is really compiled.
		err := set.Validate(n, []byte(`42`))
		var ve *schemas.ValidationError
		if !errors.As(err, &ve) || ve.Schema != n {
			t.Errorf("%s: Validate(42) = %v, want a ValidationError", n, err)
		}
		if _, err := schemas.Source(n); err != nil {
			t.Errorf("Source(%s): %v", n, err)
		}
	}
}

func TestValidateErrors(t *testing.T) {
	t.Parallel()
	set, err := schemas.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Validate("nope", []byte(`{}`)); !errors.Is(err, schemas.ErrUnknownSchema) {
		t.Errorf("unknown schema: err = %v", err)
	}
	err = set.Validate(schemas.TABar, []byte(`{"symbol":`))
	var ve *schemas.ValidationError
	if err == nil || errors.As(err, &ve) || !strings.Contains(err.Error(), "invalid JSON") {
		t.Errorf("truncated JSON: err = %v", err)
	}
	err = set.Validate(schemas.TABar, []byte(`{"symbol":"FPT","trade_date":"2025-01-02","open":"1","high":2,"low":1,"close":2}`))
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want ValidationError", err)
	}
	if got := ve.Pointers(); !slices.Equal(got, []string{"/open", "/volume"}) {
		t.Errorf("pointers = %v, want [/open /volume]", got)
	}
	if msg := err.Error(); !strings.Contains(msg, `schema ta.bar: at "/open"`) || !strings.Contains(msg, "and 1 more") {
		t.Errorf("message %q does not name the pointer", msg)
	}
}

const article = `{
	"url_canonical": "https://cafef.vn/a.html",
	"source_domain": "cafef.vn",
	"publisher_time": "2025-11-20T08:00:00+07:00",
	"first_seen_time": "2025-11-20T08:05:00Z",
	"text_normalized": "text",
	"content_hash": "abc",
	"symbols": ["FPT", "VNM"],
	"topic_tags": null,
	"hype_raw": 0.5,
	"account_weights_applied": true
}`

const bar = `{"symbol":"FPT","trade_date":"2025-11-20","open":10,"high":12.5,"low":9,"close":11,"volume":1000,
	"vwap":null,"currency":"VND","first_seen_time":"2025-11-20T10:00:00Z"}`

func TestValidateTable(t *testing.T) {
	t.Parallel()
	set, err := schemas.Compile()
	if err != nil {
		t.Fatal(err)
	}
	const uuid = "0b6f5a4e-6a0e-4b52-9a47-0d1a4a2a7f11"
	tests := []validateCase{
		// silver envelope
		{schemas.SilverEnvelope, "ta.bar", `{"task_type":"ta.bar","payload":` + bar + `}`, nil},
		{schemas.SilverEnvelope, "sa.article with optional fields", `{"task_type":"sa.article","task_id":"t-1","first_seen":"2025-11-20T08:05:00Z","payload":` + article + `}`, nil},
		{schemas.SilverEnvelope, "missing task_type", `{"payload":{}}`, []string{"/task_type"}},
		{schemas.SilverEnvelope, "unknown task_type", `{"task_type":"tb.bar","payload":{}}`, []string{"/task_type"}},
		{schemas.SilverEnvelope, "payload not an object", `{"task_type":"ta.bar","payload":"x"}`, []string{"/payload"}},
		{schemas.SilverEnvelope, "task_id a number", `{"task_type":"ta.bar","task_id":7,"payload":` + bar + `}`, []string{"/task_id"}},
		{schemas.SilverEnvelope, "first_seen not RFC 3339", `{"task_type":"ta.bar","first_seen":"yesterday","payload":` + bar + `}`, []string{"/first_seen"}},
		{schemas.SilverEnvelope, "ta.bar payload checked", `{"task_type":"ta.bar","payload":{"symbol":"FPT","trade_date":"2025-11-20","open":1,"high":1,"low":1,"close":1,"volume":1.5}}`, []string{"/payload/volume"}},
		{schemas.SilverEnvelope, "sa.article payload checked", `{"task_type":"sa.article","payload":{"url_canonical":"u"}}`,
			[]string{"/payload/content_hash", "/payload/first_seen_time", "/payload/publisher_time", "/payload/source_domain", "/payload/text_normalized"}},

		// ta.bar
		{schemas.TABar, "valid", bar, nil},
		{schemas.TABar, "integral float volume", `{"symbol":"FPT","trade_date":"2025-11-20","open":1,"high":1,"low":1,"close":1,"volume":10.0}`, nil},
		{schemas.TABar, "rules are not the schema's", `{"symbol":"fpt","trade_date":"2099-01-01","open":-1,"high":0,"low":5,"close":1,"volume":-3}`, nil},
		{schemas.TABar, "missing close", `{"symbol":"FPT","trade_date":"2025-11-20","open":1,"high":1,"low":1,"volume":1}`, []string{"/close"}},
		{schemas.TABar, "bad date", `{"symbol":"FPT","trade_date":"2025-02-30","open":1,"high":1,"low":1,"close":1,"volume":1}`, []string{"/trade_date"}},
		{schemas.TABar, "symbol a number", `{"symbol":123,"trade_date":"2025-11-20","open":1,"high":1,"low":1,"close":1,"volume":1}`, []string{"/symbol"}},
		{schemas.TABar, "price a string", `{"symbol":"FPT","trade_date":"2025-11-20","open":1,"high":"2","low":1,"close":1,"volume":1}`, []string{"/high"}},
		{schemas.TABar, "currency a number", `{"symbol":"FPT","trade_date":"2025-11-20","open":1,"high":1,"low":1,"close":1,"volume":1,"currency":704}`, []string{"/currency"}},

		// sa.article
		{schemas.SAArticle, "valid", article, nil},
		{schemas.SAArticle, "symbols not strings", strings.Replace(article, `["FPT", "VNM"]`, `["FPT", 3]`, 1), []string{"/symbols/1"}},
		{schemas.SAArticle, "publisher_time not RFC 3339", strings.Replace(article, `"2025-11-20T08:00:00+07:00"`, `"20/11/2025"`, 1), []string{"/publisher_time"}},
		{schemas.SAArticle, "hype a string", strings.Replace(article, `0.5`, `"high"`, 1), []string{"/hype_raw"}},
		{schemas.SAArticle, "weights flag a string", strings.Replace(article, `"account_weights_applied": true`, `"account_weights_applied": "yes"`, 1), []string{"/account_weights_applied"}},

		// control.flag
		{schemas.ControlFlag, "valid", `{"value":true,"lag":12001,"updated_at":"2025-11-20T10:00:00Z"}`, nil},
		{schemas.ControlFlag, "without lag", `{"value":false,"updated_at":"2025-11-20T10:00:00Z"}`, nil},
		{schemas.ControlFlag, "value a string", `{"value":"true","updated_at":"2025-11-20T10:00:00Z"}`, []string{"/value"}},
		{schemas.ControlFlag, "negative lag", `{"value":true,"lag":-1,"updated_at":"2025-11-20T10:00:00Z"}`, []string{"/lag"}},
		{schemas.ControlFlag, "missing updated_at", `{"value":true}`, []string{"/updated_at"}},

		// ingest.task
		{schemas.IngestTask, "segment", `{"job_key":"NQ:2025-11-18","symbol":"NQ","date":"2025-11-18","job_instance_id":"` + uuid + `","start_ts":1731853800000,"retry_count":0,"backfill":false}`, nil},
		{schemas.IngestTask, "trigger", `{"kind":"trigger","symbol":"NQ","date":"2025-11-18","job_instance_id":"` + uuid + `","account_id":"U12345","end_time":1731880800000,"critical_ranges":[[1731853800000,1731877200000]]}`, nil},
		{schemas.IngestTask, "instance not a uuid", `{"symbol":"NQ","date":"2025-11-18","job_instance_id":"a1b2-c3d4"}`, []string{"/job_instance_id"}},
		{schemas.IngestTask, "start_ts a string", `{"symbol":"NQ","date":"2025-11-18","job_instance_id":"` + uuid + `","start_ts":"1731853800000"}`, []string{"/start_ts"}},
		{schemas.IngestTask, "range of one", `{"symbol":"NQ","date":"2025-11-18","job_instance_id":"` + uuid + `","critical_ranges":[[1]]}`, []string{"/critical_ranges/0"}},
		{schemas.IngestTask, "unknown kind", `{"kind":"backfill","symbol":"NQ","date":"2025-11-18","job_instance_id":"` + uuid + `"}`, []string{"/kind"}},

		// ingest.job
		{schemas.IngestJob, "valid", `{"status":"RUNNING","job_instance_id":"` + uuid + `","cursor":1731853800000,"end_time":1731880800000,"heartbeat_at":1731853850000,"critical_ranges":[[1,2]],"last_error_type":"IB_504"}`, nil},
		{schemas.IngestJob, "pending without cursor", `{"status":"PENDING","job_instance_id":"` + uuid + `","cursor":null}`, nil},
		{schemas.IngestJob, "unknown status", `{"status":"DONE","job_instance_id":"` + uuid + `"}`, []string{"/status"}},
		{schemas.IngestJob, "range item a string", `{"status":"RUNNING","job_instance_id":"` + uuid + `","critical_ranges":[["9:30",2]]}`, []string{"/critical_ranges/0/0"}},

		// smap
		{schemas.SmapProjectCreated, "valid", `{"event_id":"evt_001","timestamp":"2025-11-29T10:00:00Z","payload":{"project_id":"proj_abc","keywords":["VinFast","VF3"],"targets":[{"platform":"tiktok","url":"https://t.example/x"}],"date_range":["2025-01-01","2025-02-01"]}}`, nil},
		{schemas.SmapProjectCreated, "missing envelope fields", `{"payload":{"project_id":"p"}}`, []string{"/event_id", "/timestamp"}},
		{schemas.SmapProjectCreated, "bad date range", `{"event_id":"e","timestamp":"2025-11-29T10:00:00Z","payload":{"project_id":"p","date_range":["2025-01-01","soon"]}}`, []string{"/payload/date_range/1"}},
		{schemas.SmapProjectCreated, "target without platform", `{"event_id":"e","timestamp":"2025-11-29T10:00:00Z","payload":{"project_id":"p","targets":[{"url":"u"}]}}`, []string{"/payload/targets/0/platform"}},
		{schemas.SmapDataCollected, "valid", `{"event_id":"evt_002","timestamp":"2025-11-29T10:01:00Z","payload":{"project_id":"p","item_id":"vid_888","platform":"TIKTOK","object_key":"raw/tiktok/vid_888.json","crawled_at":"2025-11-29T10:00:59Z"}}`, nil},
		{schemas.SmapDataCollected, "missing item_id", `{"event_id":"e","timestamp":"2025-11-29T10:01:00Z","payload":{"project_id":"p","object_key":"k"}}`, []string{"/payload/item_id"}},
		{schemas.SmapAnalysisFinished, "valid", `{"event_id":"e","timestamp":"2025-11-29T10:02:00Z","payload":{"project_id":"p","item_id":"i","sentiment_label":"positive","sentiment_score":0.8}}`, nil},
		{schemas.SmapAnalysisFinished, "score a string", `{"event_id":"e","timestamp":"2025-11-29T10:02:00Z","payload":{"project_id":"p","item_id":"i","sentiment_score":"0.8"}}`, []string{"/payload/sentiment_score"}},
		{schemas.SmapJobCompleted, "valid", `{"event_id":"e","timestamp":"2025-11-29T11:00:00Z","payload":{"project_id":"p","total":1000,"done":1000,"errors":3}}`, nil},
		{schemas.SmapJobCompleted, "negative errors", `{"event_id":"e","timestamp":"2025-11-29T11:00:00Z","payload":{"project_id":"p","total":1,"done":1,"errors":-1}}`, []string{"/payload/errors"}},
		{schemas.SmapEvent, "timestamp not RFC 3339", `{"event_id":"e","timestamp":"now","payload":{}}`, []string{"/timestamp"}},
	}
	checkCases(t, set, tests)
}

// validateCase is a document and the pointers Validate must report.
type validateCase struct {
	schema string
	name   string
	doc    string
	want   []string // failing pointers; nil = valid
}

// checkCases validates each case's document against its schema and
// compares the failing pointers with the case's.
func checkCases(t *testing.T, set *schemas.Set, tests []validateCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.schema+"/"+tc.name, func(t *testing.T) {
			t.Parallel()
			err := set.Validate(tc.schema, []byte(tc.doc))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("valid document rejected: %v", err)
				}
				return
			}
			var ve *schemas.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a ValidationError at %v", err, tc.want)
			}
			if got := ve.Pointers(); !slices.Equal(got, tc.want) {
				t.Fatalf("failing pointers = %v, want %v (%v)", got, tc.want, ve.Problems)
			}
		})
	}
}
