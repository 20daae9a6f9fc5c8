package trades

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

func TestDecodeCommandClassification(t *testing.T) {
	cases := []struct {
		name   string
		value  string
		reason stages.Reason
	}{
		{"not JSON", `{"kind":`, stages.ReasonDecodeError},
		{"not UTF-8", "{\"kind\":\"import\",\"user_id\":\"\xff\"}", stages.ReasonDecodeError},
		{"array", `[{"kind":"import"}]`, stages.ReasonDecodeError},
		{"null", `null`, stages.ReasonDecodeError},
		{"kind missing", `{"user_id":"u1"}`, stages.ReasonUnknownTaskType},
		{"kind empty", `{"kind":""}`, stages.ReasonUnknownTaskType},
		{"kind not a string", `{"kind":1}`, stages.ReasonUnknownTaskType},
		{"kind unknown", `{"kind":"export"}`, stages.ReasonUnknownTaskType},
		{"kind upper case", `{"kind":"IMPORT"}`, stages.ReasonUnknownTaskType},
		{"force not a bool", `{"kind":"import","force":"yes"}`, stages.ReasonDecodeError},
		{"options not an object", `{"kind":"import","options":[1]}`, stages.ReasonDecodeError},
		{"page without run_id", `{"kind":"page","user_id":"u1","import_id":"i","page":1}`, stages.ReasonDecodeError},
		{"page 0", `{"kind":"page","user_id":"u1","import_id":"i","run_id":"r","page":0}`, stages.ReasonDecodeError},
		{"page not_before malformed", `{"kind":"page","user_id":"u1","import_id":"i","run_id":"r","page":1,"not_before":"soon"}`, stages.ReasonDecodeError},
	}
	for _, c := range cases {
		_, err := DecodeCommand([]byte("u1"), []byte(c.value))
		checkRule(t, c.name, err, c.reason, "")
	}
}

func TestDecodeCommandKinds(t *testing.T) {
	c, err := DecodeCommand(nil, []byte(`{"kind":"import","user_id":"u1","since":"2025-05-01","broker":"synthetic","force":true,
		"options":{"trades":50,"page_size":10,"fail_page":2,"fail_times":3,"http429_page":3,"retry_after_ms":20,"exhaust_page":4,"reset_ms":30,"page_latency_ms":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &ImportCommand{UserID: "u1", Since: "2025-05-01", Broker: "synthetic", Force: true, Options: &SyntheticOptions{
		Trades: 50, PageSize: 10, FailPage: 2, FailTimes: 3, HTTP429Page: 3, RetryAfterMS: 20, ExhaustPage: 4, ResetMS: 30, PageLatencyMS: 5,
	}}
	if c.Kind != KindImport || c.Push != nil || c.Page != nil || !reflect.DeepEqual(c.Import, want) {
		t.Errorf("import = %+v %+v", c, c.Import)
	}

	// Rule fields of the wrong type are read as empty, so the rule reports them.
	c, err = DecodeCommand(nil, []byte(`{"kind":"import","user_id":5,"since":20250501,"broker":null}`))
	if err != nil {
		t.Fatal(err)
	}
	sanityRule(t, "numeric user_id", c.Import.Validate("5", testNow), RuleUserID)

	c, err = DecodeCommand(nil, []byte(`{"kind":"push","user_id":"u1","broker":"synthetic","push_id":"p1","trades":[{"id":"a"},7]}`))
	if err != nil {
		t.Fatal(err)
	}
	items, err := c.Push.Validate("u1")
	if err != nil || len(items) != 2 {
		t.Fatalf("push items %v, %v", items, err)
	}
	// A non-object element fails the first per-trade rule on its own.
	_, err = RawTradeFrom(items[1]).Normalize("u1", "synthetic", testNow)
	sanityRule(t, "element 7", err, RuleTradeID)

	c, err = DecodeCommand(nil, []byte(`{"kind":"push","user_id":"u1","broker":"synthetic","push_id":"p1","trades":"all"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Push.Validate("u1")
	sanityRule(t, "trades a string", err, RulePush)

	nb := time.Date(2025, 6, 1, 20, 0, 1, 0, time.UTC)
	c, err = DecodeCommand(nil, []byte(`{"kind":"page","user_id":"u1","import_id":"i","run_id":"r","page":2,"cursor":"c2","not_before":"2025-06-01T20:00:01Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind != KindPage || c.Page.Page != 2 || c.Page.Cursor != "c2" || c.Page.NotBefore == nil || !c.Page.NotBefore.Equal(nb) {
		t.Errorf("page = %+v", c.Page)
	}
}

// Commands written by this package decode to themselves.
func TestCommandsRoundTrip(t *testing.T) {
	nb := time.Date(2025, 6, 1, 20, 0, 1, 0, time.UTC)
	for _, v := range []any{
		ImportCommand{UserID: "u1", Since: "2025-05-01", Broker: "coinbase"},
		ImportCommand{UserID: "u1", Since: "2025-05-01", Broker: "synthetic", Force: true, Options: &SyntheticOptions{Trades: 9}},
		PushCommand{UserID: "u1", Broker: "binance", PushID: "p", Trades: json.RawMessage(`[{"id":"a","qty":"1"}]`)},
		PageCommand{UserID: "u1", ImportID: "i", RunID: "r", Page: 3, Cursor: "x", NotBefore: &nb},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		c, err := DecodeCommand([]byte("u1"), b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		var got any
		switch c.Kind {
		case KindImport:
			got = *c.Import
		case KindPush:
			got = *c.Push
		case KindPage:
			got = *c.Page
		}
		if !reflect.DeepEqual(got, v) {
			t.Errorf("%s decoded as %+v", b, got)
		}
	}
	// An empty push is written with an empty array, not null.
	b, _ := json.Marshal(PushCommand{UserID: "u1", Broker: "synthetic", PushID: "p"})
	c, _ := DecodeCommand(nil, b)
	if _, err := c.Push.Validate("u1"); err != nil {
		t.Errorf("empty push %s: %v", b, err)
	}
}
