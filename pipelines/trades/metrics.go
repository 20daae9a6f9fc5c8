package trades

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// Results of sluice_trades_import_pages_total.
const (
	pageStored      = "stored"       // a page's trades upserted, its events sent
	pageRetried     = "retried"      // a failed fetch the runtime retries
	pageRateLimited = "rate_limited" // a 429 answer: the page waits
	pageFailed      = "failed"       // the run failed on this page
)

// importMetrics are trades-import's collectors; the runtime adds the
// generic ones (retries, waits, DLQ, state) on the same registerer.
type importMetrics struct {
	pages     *prometheus.CounterVec // broker, result
	trades    *prometheus.CounterVec // broker, result: stored|rejected
	imports   *prometheus.CounterVec // outcome: started|completed|failed|deduped
	vendor429 *prometheus.CounterVec // source
}

// newImportMetrics registers the collectors on reg (nil: none), or adopts
// equal ones already registered (a second service in one process shares
// them).
func newImportMetrics(reg prometheus.Registerer) (*importMetrics, error) {
	f := promreg.Shared(reg)
	m := &importMetrics{
		pages:   f.CounterVec("sluice_trades_import_pages_total", "Import pages by broker and result: stored, retried (failed fetch retried), rate_limited (429), failed (the run failed).", "broker", "result"),
		trades:  f.CounterVec("sluice_trades_trades_total", "Trades of import pages by broker and result: stored (upserted) or rejected (a rule failed; dead-lettered).", "broker", "result"),
		imports: f.CounterVec("sluice_trades_imports_total", "Import and push commands by outcome: started, completed, failed, deduped.", "outcome"),
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	// One collector with the sim's (source vendor).
	v, err := NewVendor429Counter(reg)
	if err != nil {
		return nil, err
	}
	m.vendor429 = v
	for _, o := range []string{"started", "completed", "failed", "deduped"} {
		m.imports.WithLabelValues(o)
	}
	m.vendor429.WithLabelValues(Vendor429Broker)
	for _, b := range []string{BrokerSynthetic, BrokerCoinbase, BrokerBinance} {
		for _, r := range []string{pageStored, pageRetried, pageRateLimited, pageFailed} {
			m.pages.WithLabelValues(b, r)
		}
		m.trades.WithLabelValues(b, "stored")
		m.trades.WithLabelValues(b, "rejected")
	}
	return m, nil
}
