package modules

import (
	"slices"
	"strings"
	"time"
)

// JobTypeTickerActivity is the job type of an assemble request.
const JobTypeTickerActivity = "ticker_activity_analysis"

// IdempotencyKey is the key of the analysis job of ticker, jobType and
// modules requested at t: {TICKER}_{job_type}_{sorted unique modules
// joined by ','}_{UTC hour YYYY-MM-DDTHH}, e.g.
// NVDA_ticker_activity_analysis_dark_pool,options_flow_2025-01-06T14. The
// ticker is upper-cased and the modules sorted and deduplicated, so that
// requests differing in case or module order within one UTC hour share a
// job. Inputs are expected to have passed the ticker and module rules.
func IdempotencyKey(ticker, jobType string, modules []string, t time.Time) string {
	ms := slices.Clone(modules)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	return NormalizeTicker(ticker) + "_" + jobType + "_" + strings.Join(ms, ",") + "_" + t.UTC().Format("2006-01-02T15")
}
