package modules

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages/run"
)

// readyAt is a ready state of module fetched age before now, expiring with
// the module's data TTL, analysed from the same data.
func readyAt(m Module, now time.Time, age time.Duration) State {
	fetched := now.Add(-age)
	return State{Ticker: "NVDA", Module: m.ID, Status: StatusReady, FetchedAt: &fetched,
		ExpiresAt: at(fetched.Add(m.DataTTL)), InputHash: "h", UpdatedAt: fetched,
		Analysis: &Analysis{InputHash: "h", AnalysisVersion: 1, AnalyzedAt: &fetched, ExpiresAt: at(fetched.Add(m.AnalysisTTL))}}
}

// The freshness boundaries, the same as the view's (see the PostgreSQL
// test of ticker_modules_status).
func TestFreshnessOf(t *testing.T) {
	t.Parallel()
	cat := testCatalog()
	now := t0
	for _, tc := range []struct {
		module string
		age    time.Duration
		want   Freshness
	}{
		{ModuleOptionsFlow, 14 * time.Minute, FreshnessFresh},
		{ModuleOptionsFlow, 15 * time.Minute, FreshnessFresh}, // the threshold itself is not stale
		{ModuleOptionsFlow, 15*time.Minute + time.Microsecond, FreshnessStale},
		{ModuleOptionsFlow, 16 * time.Minute, FreshnessStale},
		{ModuleOptionsFlow, 60 * time.Minute, FreshnessStale}, // expires_at itself is not expired
		{ModuleOptionsFlow, 61 * time.Minute, FreshnessExpired},
		{ModuleShortInterest, 59 * time.Minute, FreshnessFresh},
		{ModuleShortInterest, 61 * time.Minute, FreshnessStale},
		{ModuleShortInterest, 24*time.Hour + time.Minute, FreshnessExpired},
	} {
		if got := FreshnessOf(readyAt(cat[tc.module], now, tc.age), cat[tc.module], now); got != tc.want {
			t.Errorf("%s fetched %s ago: %s, want %s", tc.module, tc.age, got, tc.want)
		}
	}
	m := cat[ModuleOptionsFlow]
	for _, tc := range []struct {
		s    State
		want Freshness
	}{
		{State{Status: StatusMissing}, FreshnessMissing},
		{func() State { s := readyAt(m, now, time.Minute); s.Status = StatusError; return s }(), FreshnessMissing},
		{func() State { s := readyAt(m, now, time.Minute); s.Status = StatusRefreshing; return s }(), FreshnessUnknown},
		{func() State { s := readyAt(m, now, 2*time.Hour); s.Status = StatusRefreshing; return s }(), FreshnessExpired},
		{State{Status: StatusRefreshing}, FreshnessUnknown},
	} {
		if got := FreshnessOf(tc.s, m, now); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.s, got, tc.want)
		}
	}
	// No threshold: never stale by age.
	noThreshold := Module{ID: "x", DataTTL: 24 * time.Hour}
	if got := FreshnessOf(readyAt(noThreshold, now, 23*time.Hour), noThreshold, now); got != FreshnessFresh {
		t.Errorf("no threshold: %s", got)
	}
}

func TestCanServeStale(t *testing.T) {
	t.Parallel()
	cat := testCatalog()
	for _, tc := range []struct {
		module string
		age    time.Duration
		want   bool
	}{
		{ModuleOptionsFlow, 4 * time.Hour, true},
		{ModuleOptionsFlow, 4*time.Hour + time.Microsecond, false},
		{ModuleShortInterest, 72 * time.Hour, true},
		{ModuleShortInterest, 72*time.Hour + time.Minute, false},
		{ModuleDarkPool, time.Minute, false}, // no max_stale
	} {
		if got := CanServeStale(readyAt(cat[tc.module], t0, tc.age), cat[tc.module], t0); got != tc.want {
			t.Errorf("%s fetched %s ago: %v, want %v", tc.module, tc.age, got, tc.want)
		}
	}
	if CanServeStale(State{Status: StatusMissing}, cat[ModuleOptionsFlow], t0) {
		t.Error("serves stale data never fetched")
	}
}

func TestGate(t *testing.T) {
	t.Parallel()
	m := testCatalog()[ModuleOptionsFlow] // threshold 15 min, data 1 h, analysis 30 min
	now := t0
	const cooldown = time.Minute
	fresh := readyAt(m, now, 10*time.Minute)
	// with returns a copy of s (its analysis too) changed by f.
	with := func(s State, f func(*State)) *State {
		if s.Analysis != nil {
			a := *s.Analysis
			s.Analysis = &a
		}
		f(&s)
		return &s
	}
	for _, tc := range []struct {
		name  string
		s     *State
		force bool
		want  Decision
	}{
		{"no state", nil, false, DecisionFetch},
		{"fresh, analysis current", &fresh, false, DecisionSkipFresh},
		{"fresh, forced", &fresh, true, DecisionFetch},
		{"at the threshold", with(readyAt(m, now, 15*time.Minute), func(*State) {}), false, DecisionSkipFresh},
		{"stale", with(readyAt(m, now, 16*time.Minute), func(*State) {}), false, DecisionFetch},
		{"expired", with(readyAt(m, now, 61*time.Minute), func(*State) {}), false, DecisionFetch},
		{"analysis expired", with(fresh, func(s *State) { s.Analysis.ExpiresAt = at(now.Add(-time.Nanosecond)) }), false, DecisionAnalysisOnly},
		{"analysis expires now", with(fresh, func(s *State) { s.Analysis.ExpiresAt = at(now) }), false, DecisionSkipFresh},
		{"analysis of other data", with(fresh, func(s *State) { s.Analysis.InputHash = "older" }), false, DecisionAnalysisOnly},
		{"analysis failed", with(fresh, func(s *State) { s.Analysis.Error = "analyzer crashed" }), false, DecisionAnalysisOnly},
		{"no analysis", with(fresh, func(s *State) { s.Analysis = nil }), false, DecisionAnalysisOnly},
		{"error in cooldown", with(fresh, func(s *State) { s.Status, s.UpdatedAt = StatusError, now.Add(-59*time.Second) }), false, DecisionSkipCooldown},
		{"error at cooldown end", with(fresh, func(s *State) { s.Status, s.UpdatedAt = StatusError, now.Add(-time.Minute) }), false, DecisionFetch},
		{"error in cooldown, forced", with(fresh, func(s *State) { s.Status, s.UpdatedAt = StatusError, now }), true, DecisionFetch},
		{"refreshing left by an owner", with(fresh, func(s *State) {
			s.Status, s.Lease = StatusRefreshing, &Lease{Owner: "old", Until: now.Add(time.Minute)}
		}), false, DecisionFetch},
		{"missing", &State{Status: StatusMissing}, false, DecisionFetch},
	} {
		if got := Gate(tc.s, tc.force, m, now, cooldown); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// N requests of one key queued behind a fetch cost one upstream call: the
// fetch's ready state gates the rest.
func TestGateAfterFetchSkips(t *testing.T) {
	t.Parallel()
	m := testCatalog()[ModuleOptionsFlow]
	var s *State
	fetches := 0
	for i := range 5 {
		now := t0.Add(time.Duration(i) * time.Second)
		switch Gate(s, false, m, now, DefaultErrorCooldown) {
		case DecisionFetch:
			fetches++
			base := State{Ticker: "NVDA", Module: m.ID}
			if s != nil {
				base = *s
			}
			fetched := now
			ready := base.Refreshing("me", run.Token{Epoch: 1, Version: int64(2 * i)}, now).Ready(m, "h", "", &Analysis{InputHash: "h",
				AnalysisVersion: 1, AnalyzedAt: &fetched, ExpiresAt: at(fetched.Add(m.AnalysisTTL))}, run.Token{Epoch: 1, Version: int64(2*i + 1)}, now)
			s = &ready
		case DecisionSkipFresh:
		default:
			t.Fatalf("request %d: unexpected decision", i)
		}
	}
	if fetches != 1 {
		t.Errorf("%d fetches for 5 queued requests", fetches)
	}
}
