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
	attempts *prometheus.CounterVec // path: insert | copy
}

// newMetrics registers the collectors on reg (nil: none), or adopts the
// equal ones already registered (promreg.Shared: two sinks for the same
// pipeline and table share their series); its error is the registry's.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f := promreg.Shared(reg)
	m := &metrics{
		written:  f.Counter("sluice_pgsink_rows_written_total", "Batch items that landed in the table (items merged by key count one each)."),
		rejected: f.CounterVec("sluice_pgsink_rows_rejected_total", "Batch items the database refused permanently, by rule (pg.SQLSTATE[.constraint]).", "rule"),
		merged:   f.Counter("sluice_pgsink_rows_merged_total", "Batch items merged in memory into an earlier item of the same key."),
		txs: f.CounterVec("sluice_pgsink_transactions_total",
			"Write transactions by result (ok, row_error: a row was refused and the batch is bisected, error: other failure, conflict: the COPY of new keys hit a unique violation and the rows are upserted in a new transaction).",
			"result"),
		duration: f.HistogramVec("sluice_pgsink_write_duration_seconds", "Duration of Write calls (bisection included), by result (ok, rejected, error).",
			prometheus.ExponentialBuckets(0.0005, 2, 16), "result"),
		attempts: f.CounterVec("sluice_pgsink_attempts_total",
			"Transactions that write rows (bisection halves and retries included), by how the rows are sent: insert (one INSERT … VALUES statement, batches of at most WithSmallBatch rows) or copy (COPY into the table or a staging table).",
			"path"),
		batch: f.Histogram("sluice_pgsink_batch_size", "Items per Write call, before merging by key.", prometheus.ExponentialBuckets(1, 2, 15)),
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	return m, nil
}
