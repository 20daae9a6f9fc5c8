package modules

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

var t0 = time.Date(2025, 1, 6, 14, 0, 0, 0, time.UTC)

func TestStateRecordFormat(t *testing.T) {
	t.Parallel()
	// A state without data: every field present, null when unset.
	s := State{Ticker: "NVDA", Module: ModuleOptionsFlow, Status: StatusMissing, Epoch: 3, Version: 1, UpdatedAt: t0}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"ticker":"NVDA","module":"options_flow","status":"missing","fetched_at":null,"expires_at":null,` +
		`"data_date":null,"input_hash":null,"analysis":null,"last_error":null,"error_count":0,"lease":null,` +
		`"epoch":3,"version":1,"updated_at":"2025-01-06T14:00:00Z"}`
	if string(b) != want {
		t.Errorf("encoded\n%s\nwant\n%s", b, want)
	}

	// A full one survives the round trip through DecodeState.
	full := State{Ticker: "NVDA", Module: ModuleShortInterest, Status: StatusRefreshing,
		FetchedAt: at(t0.Add(-time.Hour)), ExpiresAt: at(t0.Add(23 * time.Hour)), DataDate: "2025-01-01", InputHash: "ab12",
		Analysis:  &Analysis{InputHash: "ab12", AnalysisVersion: 2, AnalyzedAt: at(t0.Add(-time.Hour)), ExpiresAt: at(t0.Add(time.Hour)), Error: "x"},
		LastError: "503", ErrorCount: 2, Lease: &Lease{Owner: "member-1", Until: t0.Add(LeaseDuration)},
		Epoch: 4, Version: 9, UpdatedAt: t0}
	b, err = json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{`"data_date":"2025-01-01"`, `"lease":{"owner":"member-1","until":"2025-01-06T14:02:00Z"}`,
		`"analysis":{"input_hash":"ab12","analysis_version":2,`, `"epoch":4,"version":9`} {
		if !strings.Contains(string(b), part) {
			t.Errorf("encoded %s lacks %s", b, part)
		}
	}
	got, err := DecodeState([]byte(full.Key()), b)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(got)
	if string(again) != string(b) {
		t.Errorf("round trip\n%s\n%s", again, b)
	}
}

func TestDecodeStateErrors(t *testing.T) {
	t.Parallel()
	ok := `{"ticker":"NVDA","module":"dark_pool","status":"ready","epoch":1,"version":1,"updated_at":"2025-01-06T14:00:00Z"}`
	if _, err := DecodeState([]byte("NVDA:dark_pool"), []byte(ok)); err != nil {
		t.Fatalf("valid state: %v", err)
	}
	for name, tc := range map[string]struct{ key, value string }{
		"not JSON":        {"NVDA:dark_pool", `ready`},
		"not an object":   {"NVDA:dark_pool", `[1]`},
		"not UTF-8":       {"NVDA:dark_pool", "{\"ticker\":\"\xff\"}"},
		"no ticker":       {"NVDA:dark_pool", `{"module":"dark_pool","status":"ready"}`},
		"unknown status":  {"NVDA:dark_pool", strings.Replace(ok, `"ready"`, `"stale"`, 1)},
		"negative epoch":  {"NVDA:dark_pool", strings.Replace(ok, `"epoch":1`, `"epoch":-1`, 1)},
		"bad data_date":   {"NVDA:dark_pool", strings.Replace(ok, `"status"`, `"data_date":"2025-13-01","status"`, 1)},
		"another key":     {"NVDA:options_flow", ok},
		"wrong type":      {"NVDA:dark_pool", strings.Replace(ok, `"version":1`, `"version":"1"`, 1)},
		"lower-case key":  {"nvda:dark_pool", ok},
		"bad lease until": {"NVDA:dark_pool", strings.Replace(ok, `"status"`, `"lease":{"until":"soon"},"status"`, 1)},
	} {
		_, err := DecodeState([]byte(tc.key), []byte(tc.value))
		if c := stages.Classify(err); c == nil || c.Kind != stages.KindDeadLetter || c.Reason != stages.ReasonDecodeError {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestSupersedes(t *testing.T) {
	t.Parallel()
	s := func(epoch int32, version int64) State { return State{Epoch: epoch, Version: version} }
	for _, tc := range []struct {
		next, prev State
		want       bool
	}{
		{s(1, 2), s(1, 1), true},
		{s(1, 1), s(1, 1), false},
		{s(1, 1), s(1, 2), false},
		{s(2, 1), s(1, 9), true},   // a new owner's first write
		{s(1, 10), s(2, 1), false}, // a zombie's late write
	} {
		if got := tc.next.Supersedes(tc.prev); got != tc.want {
			t.Errorf("(%d,%d).Supersedes(%d,%d) = %v", tc.next.Epoch, tc.next.Version, tc.prev.Epoch, tc.prev.Version, got)
		}
	}
}

func tok(epoch int32, version int64) run.Token { return run.Token{Epoch: epoch, Version: version} }

func TestStateTransitions(t *testing.T) {
	t.Parallel()
	m := testCatalog()[ModuleOptionsFlow]
	start := State{Ticker: "NVDA", Module: ModuleOptionsFlow, Status: StatusMissing, Epoch: 1, Version: 4}

	r := start.Refreshing("member-a", tok(2, 5), t0)
	if r.Status != StatusRefreshing || r.Lease == nil || r.Lease.Owner != "member-a" || !r.Lease.Until.Equal(t0.Add(120*time.Second)) ||
		r.Epoch != 2 || r.Version != 5 || !r.UpdatedAt.Equal(t0) || !r.Supersedes(start) {
		t.Fatalf("refreshing = %+v", r)
	}
	a := &Analysis{InputHash: "h1", AnalysisVersion: 1}
	ready := r.Ready(m, "h1", "", a, tok(2, 6), t0.Add(time.Second))
	if ready.Status != StatusReady || ready.Lease != nil || ready.InputHash != "h1" || ready.Analysis != a ||
		!ready.FetchedAt.Equal(t0.Add(time.Second)) || !ready.ExpiresAt.Equal(t0.Add(time.Second+time.Hour)) ||
		ready.Version != 6 || ready.ErrorCount != 0 || ready.LastError != "" {
		t.Fatalf("ready = %+v", ready)
	}

	// A failure keeps the last good data and its analysis, counts, and
	// clears the lease.
	failed := ready.Refreshing("member-a", tok(2, 7), t0.Add(time.Hour)).Failed(errors.New("upstream answered HTTP 503"), tok(2, 8), t0.Add(time.Hour+time.Second))
	if failed.Status != StatusError || failed.Lease != nil || failed.LastError != "upstream answered HTTP 503" || failed.ErrorCount != 1 ||
		failed.InputHash != "h1" || failed.Analysis != a || !failed.FetchedAt.Equal(*ready.FetchedAt) || failed.Version != 8 {
		t.Fatalf("failed = %+v", failed)
	}
	if again := failed.Failed(nil, tok(3, 9), t0.Add(2*time.Hour)); again.ErrorCount != 2 || again.LastError != "refresh failed" || again.Epoch != 3 || again.Version != 9 {
		t.Errorf("second failure = %+v", again)
	}
	long := failed.Failed(errors.New(strings.Repeat("é", 1000)), tok(2, 9), t0)
	if len(long.LastError) > maxErrorBytes+len("…") || !strings.HasSuffix(long.LastError, "…") {
		t.Errorf("long error kept %d bytes", len(long.LastError))
	}
	// Ready after an error clears it.
	if ok := failed.Ready(m, "h2", "", nil, tok(2, 9), t0.Add(3*time.Hour)); ok.ErrorCount != 0 || ok.LastError != "" || ok.Status != StatusReady {
		t.Errorf("ready after error = %+v", ok)
	}
}

func TestStateStoreConfig(t *testing.T) {
	t.Parallel()
	cfg := StateStoreConfig("modules.state")
	if _, err := run.NewStore(cfg); err != nil {
		t.Fatal(err)
	}
	s := State{Ticker: "NVDA", Module: ModuleDarkPool, Status: StatusReady, DataDate: "2025-01-06", Epoch: 2, Version: 7, UpdatedAt: t0}
	b, err := cfg.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cfg.Decode(b)
	if err != nil || got.Key() != s.Key() || got.DataDate != s.DataDate || got.Token() != s.Token() || !got.UpdatedAt.Equal(t0) {
		t.Errorf("round trip = %+v, %v", got, err)
	}
	if _, err := cfg.Decode([]byte(`{"ticker":"NVDA"}`)); err == nil {
		t.Error("a state without module decoded")
	}
	// The restore keeps the greatest token, not the last record.
	older := run.Entry[State]{Key: s.Key(), Token: run.Token{Epoch: 1, Version: 9}, Tokened: true}
	newer := run.Entry[State]{Key: s.Key(), Token: run.Token{Epoch: 2, Version: 1}, Tokened: true}
	if cfg.Fold(newer, older) || !cfg.Fold(older, newer) {
		t.Error("the fold does not keep the greatest token")
	}
}
