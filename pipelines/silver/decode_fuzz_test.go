package silver

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// Whatever bytes arrive on bronze.records, Decode and the silver stage
// never panic and end in exactly one of: one row of the envelope's task
// type that satisfies the rules checked below, or a dead letter with a
// reason of the contract (decode_error and unknown_task_type without a
// rule, sanity_fail with one of Rules()). Nothing is retried or fatal.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("VNM"), envelope(f, TaskTA, taBase(), nil, nil))
	f.Add([]byte("VNM"), envelope(f, TaskTA, taBase(), map[string]any{"trade_date": "0000-01-01"}, nil))
	f.Add([]byte("VNM"), envelope(f, TaskTA, taBase(), map[string]any{"trade_date": "1899-12-31", "currency": "USD"}, nil))
	f.Add([]byte("VNM"), envelope(f, TaskTA, taBase(), map[string]any{"volume": raw("0"), "vwap": raw("1e400")}, map[string]any{"task_id": 7, "first_seen": "2025-06-01T10:00:00Z"}))
	f.Add([]byte("u"), envelope(f, TaskSA, saBase(), nil, nil))
	f.Add([]byte("u"), envelope(f, TaskSA, saBase(), map[string]any{"symbols": []string{}, "language": "fr", "hype_raw": raw("-0")}, nil))
	for _, v := range []string{
		``, `null`, `{}`, `{"task_type":"ta.bar","payload":{}}`, `{"task_type":"sa.article","payload":{"url_canonical":"http://x"}}`,
		"{\"task_type\":\"ta.bar\xff\",\"payload\":{}}", `{"task_type":"ta.bar\udc00","payload":{}}`,
		`{"task_type":"ta.bar","payload":{"symbol":"VNM","trade_date":"2025-02-30"}}`,
		`{"task_type":"ta.bar","payload":{"symbol":"VNM","symbol":"\ud800"}}`,
		`{"task_type":"ta.bar","payload":{"x":1},"payload":{"symbol":"FPT"}} `,
		`{"task_type":"ta.bar","payload":{},"first_seen":"2025-06-01T10:00:00,5Z"}`,
	} {
		f.Add([]byte("k"), []byte(v))
	}
	stage := Stage(WithClock(testClock))
	ny, nm, nd := testNow.In(defaultMarketLocation()).Date()
	today := time.Date(ny, nm, nd, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, key, value []byte) {
		env, err := Decode(key, value)
		if err != nil {
			deadLettered(t, err, stages.ReasonDecodeError, stages.ReasonUnknownTaskType)
			return
		}
		if env.TaskType != TaskTA && env.TaskType != TaskSA {
			t.Fatalf("Decode accepted task_type %q", env.TaskType)
		}
		rows, err := stage(context.Background(), stages.Msg[Envelope]{Value: env, Source: stages.Source{Timestamp: testNow}})
		if err != nil {
			if c := deadLettered(t, err, stages.ReasonDecodeError, stages.ReasonSanityFail); c.Reason == stages.ReasonSanityFail && !slices.Contains(Rules(), c.Rule) {
				t.Fatalf("sanity_fail with rule %q, not one of Rules(): %v", c.Rule, err)
			}
			return
		}
		if len(rows) != 1 {
			t.Fatalf("%d rows, want 1", len(rows))
		}
		r := rows[0]
		switch {
		case env.TaskType == TaskTA && r.TA != nil && r.SA == nil:
			d := r.TA.TradeDate
			if !isSymbol(r.TA.Symbol) || d.Year() < MinTradeYear || d.After(today) || r.Key() == "" {
				t.Fatalf("ta row breaks the rules: %+v", r.TA)
			}
		case env.TaskType == TaskSA && r.SA != nil && r.TA == nil:
			if r.SA.URLCanonical == "" || r.Key() == "" {
				t.Fatalf("sa row without its key: %+v", r.SA)
			}
		default:
			t.Fatalf("task type %s gave row %+v", env.TaskType, r)
		}
	})
}

// deadLettered fails the test unless err is a dead letter with one of
// reasons; decode_error and unknown_task_type carry no rule.
func deadLettered(t *testing.T, err error, reasons ...stages.Reason) *stages.Error {
	t.Helper()
	c := stages.Classify(err)
	if c.Kind != stages.KindDeadLetter || !slices.Contains(reasons, c.Reason) {
		t.Fatalf("error %v is kind %v reason %q; want a dead letter with one of %v", err, c.Kind, c.Reason, reasons)
	}
	if c.Reason != stages.ReasonSanityFail && c.Rule != "" {
		t.Fatalf("%s with rule %q: %v", c.Reason, c.Rule, err)
	}
	return c
}
