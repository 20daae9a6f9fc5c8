package modules

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// Outcomes of sluice_modules_requests_total besides the gate's decisions.
const (
	outcomeRekeyed = "rekeyed"
	outcomeError   = "error"
)

// metrics are the modules pipeline's collectors (sluice_modules_*); the
// runtime adds its generic ones and the limiter its own on the same
// registerer.
type metrics struct {
	requests  *prometheus.CounterVec // module, outcome
	upstream  *prometheus.CounterVec // module, result: ok|transient|rejected|rate_limited
	duration  *prometheus.HistogramVec
	analyses  *prometheus.CounterVec // module, result: computed|cache_hit|error
	fenced    *prometheus.CounterVec // where: restore|mirror
	takeovers prometheus.Counter
}

// newMetrics registers the collectors on reg (nil: none), or adopts equal
// ones already registered, so that both services of one process, or two
// members of a test, share them.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f := promreg.Shared(reg)
	m := &metrics{
		requests: f.CounterVec("sluice_modules_requests_total",
			"Refresh requests handled, per module and outcome (fetched, skipped_fresh, skipped_cooldown, analysis_only, rekeyed, error).", "module", "outcome"),
		upstream: f.CounterVec("sluice_modules_upstream_calls_total",
			"Upstream calls, per module and result (ok, transient, rejected, rate_limited).", "module", "result"),
		duration: f.HistogramVec("sluice_modules_upstream_duration_seconds", "Upstream call latency.",
			prometheus.ExponentialBuckets(0.005, 3, 10), "module"),
		analyses: f.CounterVec("sluice_modules_analyses_total",
			"Unit analyses, per module and result (computed, cache_hit, error).", "module", "result"),
		fenced: f.CounterVec("sluice_modules_fenced_total",
			"State records refused for a smaller fencing token: on restore (a revoked owner's late record) and by the mirror (a row already at an equal or greater token).", "where"),
		takeovers: f.Counter("sluice_modules_takeovers_total",
			"Refreshes left unfinished by a previous owner (state refreshing at a smaller epoch) and taken over."),
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	m.fenced.WithLabelValues("restore")
	m.fenced.WithLabelValues("mirror")
	return m, nil
}
