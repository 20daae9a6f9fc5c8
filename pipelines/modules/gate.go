package modules

import "time"

// Freshness is a ticker × module's derived freshness, as the view
// ticker_modules_status computes it.
type Freshness string

// The freshness values.
const (
	FreshnessMissing Freshness = "missing"
	FreshnessExpired Freshness = "expired"
	FreshnessStale   Freshness = "stale"
	FreshnessFresh   Freshness = "fresh"
	FreshnessUnknown Freshness = "unknown"
)

// DefaultErrorCooldown is how long after a failed refresh a key's requests
// are skipped (MODULES_ERROR_COOLDOWN).
const DefaultErrorCooldown = 60 * time.Second

// FreshnessOf derives s's freshness at now with m's threshold, in the
// view's order: missing (status missing or error), expired (now after
// ExpiresAt), stale (fetched more than the threshold before now: exactly
// the threshold is not stale), fresh (ready), else unknown.
func FreshnessOf(s State, m Module, now time.Time) Freshness {
	switch {
	case s.Status == StatusMissing || s.Status == StatusError:
		return FreshnessMissing
	case s.ExpiresAt != nil && now.After(*s.ExpiresAt):
		return FreshnessExpired
	case s.FetchedAt != nil && m.FreshnessThreshold != nil && now.Sub(*s.FetchedAt) > *m.FreshnessThreshold:
		return FreshnessStale
	case s.Status == StatusReady:
		return FreshnessFresh
	}
	return FreshnessUnknown
}

// CanServeStale reports whether s's data may be served although not fresh:
// the module has a max_stale and the data was fetched no longer than that
// before now.
func CanServeStale(s State, m Module, now time.Time) bool {
	return m.MaxStale != nil && s.FetchedAt != nil && now.Sub(*s.FetchedAt) <= *m.MaxStale
}

// AnalysisCurrent reports whether s's analysis may be reused at now: it
// succeeded, was computed from s's data (same input hash) and has not
// expired.
func AnalysisCurrent(s State, now time.Time) bool {
	a := s.Analysis
	return a != nil && a.Error == "" && s.InputHash != "" && a.InputHash == s.InputHash &&
		a.ExpiresAt != nil && !now.After(*a.ExpiresAt)
}

// Decision is what a refresh request leads to; its value is the outcome
// label of sluice_modules_requests_total.
type Decision string

// The decisions.
const (
	// DecisionFetch: call the upstream, then analyse.
	DecisionFetch Decision = "fetched"
	// DecisionAnalysisOnly: the data is current, its analysis is not.
	DecisionAnalysisOnly Decision = "analysis_only"
	// DecisionSkipFresh: data and analysis are current; nothing to do.
	DecisionSkipFresh Decision = "skipped_fresh"
	// DecisionSkipCooldown: the last refresh failed less than the cooldown
	// ago; nothing to do.
	DecisionSkipCooldown Decision = "skipped_cooldown"
)

// Gate decides a refresh request of the key whose current state is s (nil:
// none yet) at now. A forced request always fetches. Otherwise: data fresh
// (FreshnessOf) and analysis current skip as fresh; status error updated
// less than cooldown ago skips as cooldown; data fresh but analysis not
// analyses only; anything else fetches. A refreshing state is a refresh
// that a previous owner left unfinished: it is fetched again (taken over).
// Because a fetch makes the data fresh, queued requests of one key after
// the first cost no upstream call.
func Gate(s *State, force bool, m Module, now time.Time, cooldown time.Duration) Decision {
	if force || s == nil {
		return DecisionFetch
	}
	if s.Status == StatusError && now.Sub(s.UpdatedAt) < cooldown {
		return DecisionSkipCooldown
	}
	if FreshnessOf(*s, m, now) != FreshnessFresh {
		return DecisionFetch
	}
	if AnalysisCurrent(*s, now) {
		return DecisionSkipFresh
	}
	return DecisionAnalysisOnly
}
