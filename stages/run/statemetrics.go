package run

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// stateMetrics are the collectors of a runner's state stores and timers,
// with the runner's constant "pipeline" label.
type stateMetrics struct {
	restoreRecords *prometheus.CounterVec // store: changelog records read by restores
	restoreSkipped *prometheus.CounterVec // store: records Decode refused
	restoring      *prometheus.GaugeVec   // store: partitions restoring
	fenced         *prometheus.CounterVec // store, where: restore|fold|write
	writes         *prometheus.CounterVec // store: changelog records produced
	firings        *prometheus.CounterVec // timer (store name, or "periodic"), result: ok|retry|wait|dropped
	timerRejected  prometheus.Counter     // timer outputs the sink rejected
}

// newStateMetrics registers the state and timer collectors of pipeline on
// reg (nil: a private registry) and exports at 0 the series of the stores
// and timers known in advance.
func newStateMetrics(reg prometheus.Registerer, pipeline string, stores []string, periodic bool) (*stateMetrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": pipeline}, reg)
	f := promreg.Exclusive(reg)
	m := &stateMetrics{
		restoreRecords: f.CounterVec("sluice_state_restore_records_total", "Changelog records read by state store restores, per store.", "store"),
		restoreSkipped: f.CounterVec("sluice_state_restore_skipped_total", "Changelog records a restore skipped because the store's Decode refused them, per store.", "store"),
		restoring:      f.GaugeVec("sluice_state_restoring", "Partitions whose state store is being restored, per store (the runner is not ready meanwhile).", "store"),
		fenced: f.CounterVec("sluice_state_fenced_total",
			"State writes refused, per store and where: restore (a zombie's record, its epoch below one read before it), fold (the store's Fold kept the earlier entry), write (a worker that lost its partition did not produce).",
			"store", "where"),
		writes:        f.CounterVec("sluice_state_writes_total", "Changelog records produced (acknowledged), per store.", "store"),
		firings:       f.CounterVec("sluice_timer_firings_total", "Timer firings, per timer (the store of a keyed timer, or periodic) and result (ok; retry: a retry error, fired again; wait: a stages.Wait, fired again after it without spending an attempt; dropped).", "timer", "result"),
		timerRejected: f.Counter("sluice_timer_outputs_rejected_total", "Outputs of timer firings the sink rejected (dropped: a firing has no source record to dead-letter)."),
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	timers := stores
	if periodic {
		timers = append(timers[:len(timers):len(timers)], "periodic")
	}
	for _, s := range stores {
		m.restoreRecords.WithLabelValues(s)
		m.restoreSkipped.WithLabelValues(s)
		m.restoring.WithLabelValues(s)
		m.writes.WithLabelValues(s)
		for _, where := range []string{"restore", "fold", "write"} {
			m.fenced.WithLabelValues(s, where)
		}
	}
	for _, t := range timers {
		for _, res := range []string{"ok", "retry", "wait", "dropped"} {
			m.firings.WithLabelValues(t, res)
		}
	}
	return m, nil
}
