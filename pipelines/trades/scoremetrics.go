package trades

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// scoreMetrics are trades-score's domain metrics (the runner adds the
// runtime's).
type scoreMetrics struct {
	scored         *prometheus.CounterVec   // label: a label name, or none
	reflected      *prometheus.CounterVec   // repeat: false|true
	reflectLatency prometheus.Histogram     // request start → coach.reflect acknowledged
	ai             *prometheus.HistogramVec // endpoint
}

func newScoreMetrics(reg prometheus.Registerer) (*scoreMetrics, error) {
	f := promreg.Shared(reg)
	m := &scoreMetrics{
		scored: f.CounterVec("sluice_trades_scored_total",
			"Trades scored, per label (a trade with several labels counts under each; none: no label).", "label"),
		reflected: f.CounterVec("sluice_trades_reflect_published_total",
			"coach.reflect events published; repeat=true: re-sent because an earlier publication was not marked (a redelivery).", "repeat"),
		reflectLatency: f.Histogram("sluice_trades_reflect_latency_seconds",
			"Time from the start of scoring a request to the acknowledgement of its coach.reflect.", prometheus.ExponentialBuckets(0.05, 2, 10)),
		ai: f.HistogramVec("sluice_trades_ai_request_duration_seconds",
			"AI coach request latency, per endpoint.", prometheus.ExponentialBuckets(0.01, 2, 12), "endpoint"),
	}
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("trades-score metrics: %w", err)
	}
	for _, l := range []string{LabelOvertrading, LabelRevengeTrading, LabelSizeEscalation, "none"} {
		m.scored.WithLabelValues(l)
	}
	for _, r := range []string{"false", "true"} {
		m.reflected.WithLabelValues(r)
	}
	return m, nil
}

// digestMetrics are trades-digest's domain metrics.
type digestMetrics struct {
	emitted *prometheus.CounterVec // kind: first|revision|requested
}

func newDigestMetrics(reg prometheus.Registerer, windows func() float64) (*digestMetrics, error) {
	f := promreg.Shared(reg)
	m := &digestMetrics{
		emitted: f.CounterVec("sluice_trades_digests_emitted_total",
			"Digests emitted (object, digests row and digest.ready), per kind: first revision, a later revision, or requested.", "kind"),
	}
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("trades-digest metrics: %w", err)
	}
	for _, k := range []string{emitFirst, emitRevision, emitRequested} {
		m.emitted.WithLabelValues(k)
	}
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_trades_digest_windows",
		Help: "Digest windows held in the state of this member's partitions (as their last timer firing counted them).",
	}, windows)
	if reg != nil {
		if err := reg.Register(g); err != nil {
			return nil, fmt.Errorf("trades-digest metrics: %w", err)
		}
	}
	return m, nil
}
