package pgsink

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// metrics of one sink. Every series carries the const labels pipeline and
// table (added by the wrapping registerer), so several sinks can share one
// registry.
type metrics struct {
	written  prometheus.Counter
	rejected *prometheus.CounterVec   // rule
	merged   prometheus.Counter       // items folded into an earlier item of the same key
	txs      *prometheus.CounterVec   // result: ok | row_error | error | conflict
	duration *prometheus.HistogramVec // result: ok | rejected | error
	batch    prometheus.Histogram
}

// newMetrics registers the collectors on reg (nil: none), or adopts the
// equal ones already registered (promreg.Register: two sinks for the same
// pipeline and table share their series); its error is the registry's.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_pgsink_rows_written_total",
			Help: "Batch items that landed in the table (items merged by key count one each).",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_pgsink_rows_rejected_total",
			Help: "Batch items the database refused permanently, by rule (pg.SQLSTATE[.constraint]).",
		}, []string{"rule"}),
		merged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_pgsink_rows_merged_total",
			Help: "Batch items merged in memory into an earlier item of the same key.",
		}),
		txs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_pgsink_transactions_total",
			Help: "Write transactions by result (ok, row_error: a row was refused and the batch is bisected, error: other failure, conflict: the COPY of new keys hit a unique violation and the rows are upserted in a new transaction).",
		}, []string{"result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_pgsink_write_duration_seconds",
			Help:    "Duration of Write calls (bisection included), by result (ok, rejected, error).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"result"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_pgsink_batch_size",
			Help:    "Items per Write call, before merging by key.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 15),
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.written, err = promreg.Register(reg, m.written); err != nil {
		return nil, err
	}
	if m.rejected, err = promreg.Register(reg, m.rejected); err != nil {
		return nil, err
	}
	if m.merged, err = promreg.Register(reg, m.merged); err != nil {
		return nil, err
	}
	if m.txs, err = promreg.Register(reg, m.txs); err != nil {
		return nil, err
	}
	if m.duration, err = promreg.Register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.batch, err = promreg.Register(reg, m.batch); err != nil {
		return nil, err
	}
	return m, nil
}
