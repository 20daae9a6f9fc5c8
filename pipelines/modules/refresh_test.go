package modules

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

func TestDecodeRefreshErrors(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{
		"not UTF-8":            "{\"ticker\":\"\xff\"}",
		"not JSON":             `ticker=NVDA`,
		"array":                `["NVDA","options_flow"]`,
		"null":                 `null`,
		"string":               `"NVDA:options_flow"`,
		"truncated":            `{"ticker":"NVDA"`,
		"reason not a string":  `{"ticker":"NVDA","module":"options_flow","reason":1}`,
		"request_id number":    `{"ticker":"NVDA","module":"options_flow","request_id":7}`,
		"requested_at garbage": `{"ticker":"NVDA","module":"options_flow","requested_at":"yesterday"}`,
	} {
		_, err := DecodeRefresh(nil, []byte(value))
		if c := stages.Classify(err); c == nil || c.Kind != stages.KindDeadLetter || c.Reason != stages.ReasonDecodeError {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func validate(t *testing.T, key, value string) (Validated, error) {
	t.Helper()
	r, err := DecodeRefresh([]byte(key), []byte(value))
	if err != nil {
		t.Fatalf("decode %s: %v", value, err)
	}
	return r.Validate(key, testCatalog())
}

func TestValidateNormalises(t *testing.T) {
	t.Parallel()
	v, err := validate(t, "NVDA:options_flow", `{"ticker":"nvda","module":"options_flow","force":true,"reason":"api",
		"job_id":"0B1E4F8A-3C2D-4E5F-8A9B-0C1D2E3F4A5B","requested_at":"2025-01-06T15:04:05+01:00","request_id":"r-1","extra":1}`)
	if err != nil {
		t.Fatal(err)
	}
	want := RefreshRequest{Ticker: "NVDA", Module: "options_flow", Force: true, Reason: "api",
		JobID: "0b1e4f8a-3c2d-4e5f-8a9b-0c1d2e3f4a5b", RequestedAt: time.Date(2025, 1, 6, 14, 4, 5, 0, time.UTC), RequestID: "r-1"}
	if v.Request != want || v.Rekey || v.Module.ID != ModuleOptionsFlow {
		t.Errorf("validated = %+v, want request %+v", v, want)
	}
	// The produced record is the normalised request.
	b, err := json.Marshal(v.Request)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != `{"ticker":"NVDA","module":"options_flow","force":true,"reason":"api","job_id":"0b1e4f8a-3c2d-4e5f-8a9b-0c1d2e3f4a5b","requested_at":"2025-01-06T14:04:05Z","request_id":"r-1"}` {
		t.Errorf("encoded %s", got)
	}

	// Optional fields: force false, no job.
	v, err = validate(t, "AAPL:dark_pool", `{"ticker":"AAPL","module":"dark_pool","force":null,"job_id":null}`)
	if err != nil || v.Request.Force || v.Request.JobID != "" {
		t.Fatalf("optional fields = %+v, %v", v, err)
	}
	if b, _ := json.Marshal(v.Request); string(b) != `{"ticker":"AAPL","module":"dark_pool","force":false,"reason":"","requested_at":"0001-01-01T00:00:00Z","request_id":""}` {
		t.Errorf("encoded %s", b)
	}
}

// The rules apply in order ticker, module, request, unknown_module, key:
// a record failing several reports the first.
func TestValidateRuleOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, key, value, rule string
	}{
		{"ticker missing", "x", `{"module":"nope!","force":"yes"}`, RuleTicker},
		{"ticker not a string", "x", `{"ticker":true,"module":"options_flow"}`, RuleTicker},
		{"ticker null", "x", `{"ticker":null,"module":"options_flow"}`, RuleTicker},
		{"ticker bad", "x", `{"ticker":"NV DA","module":"Bad","force":1}`, RuleTicker},
		{"module missing", "x", `{"ticker":"NVDA","force":1}`, RuleModule},
		{"module not a string", "x", `{"ticker":"NVDA","module":["options_flow"]}`, RuleModule},
		{"module upper case", "x", `{"ticker":"NVDA","module":"OPTIONS_FLOW"}`, RuleModule},
		{"force a string", "x", `{"ticker":"NVDA","module":"nope","force":"true"}`, RuleRequest},
		{"force a number", "x", `{"ticker":"NVDA","module":"options_flow","force":1}`, RuleRequest},
		{"job_id a number", "x", `{"ticker":"NVDA","module":"options_flow","job_id":12}`, RuleRequest},
		{"job_id not a uuid", "x", `{"ticker":"NVDA","module":"nope","job_id":"job-1"}`, RuleRequest},
		{"unknown module", "x", `{"ticker":"NVDA","module":"insider_trades"}`, RuleUnknownModule},
		{"disabled module", "NVDA:retired", `{"ticker":"NVDA","module":"retired"}`, RuleUnknownModule},
		{"other module in key", "NVDA:dark_pool", `{"ticker":"NVDA","module":"options_flow"}`, RuleKey},
		{"other ticker in key", "NVDX:options_flow", `{"ticker":"NVDA","module":"options_flow"}`, RuleKey},
		{"empty key", "", `{"ticker":"NVDA","module":"options_flow"}`, RuleKey},
	} {
		_, err := validate(t, tc.key, tc.value)
		if c := stages.Classify(err); c == nil || c.Kind != stages.KindDeadLetter || c.Reason != stages.ReasonSanityFail || c.Rule != tc.rule {
			t.Errorf("%s: err = %v, want rule %s", tc.name, err, tc.rule)
		}
	}
}

func TestValidateRekeysCaseOnlyMismatch(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"nvda:options_flow", "NVDA:OPTIONS_FLOW", "nVdA:options_flow"} {
		v, err := validate(t, key, `{"ticker":"Nvda","module":"options_flow"}`)
		if err != nil || !v.Rekey || v.Request.Key() != "NVDA:options_flow" {
			t.Errorf("key %s: %+v, %v; want re-keyed to NVDA:options_flow", key, v, err)
		}
	}
	// A lower-case ticker under the normalised key is no re-key.
	v, err := validate(t, "NVDA:options_flow", `{"ticker":"nvda","module":"options_flow"}`)
	if err != nil || v.Rekey {
		t.Errorf("normalised key: %+v, %v", v, err)
	}
}
