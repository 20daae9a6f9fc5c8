package trades

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// Sources of sluice_trades_vendor_429_total: the broker adapters of
// trades-import and the market-data vendor of the sim.
const (
	Vendor429Broker = "broker"
	Vendor429Vendor = "vendor"
)

// NewVendor429Counter returns sluice_trades_vendor_429_total{source}, the
// HTTP 429 answers (rate limits) of an upstream, registered on reg (nil: not
// registered). Every user of the metric calls this constructor: the second
// call on the same registry adopts the collector the first one registered,
// so trades-import (source broker) and the sim (source vendor) share one
// series family. Safe for concurrent use.
func NewVendor429Counter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	f := promreg.Shared(reg)
	c := f.CounterVec("sluice_trades_vendor_429_total",
		"HTTP 429 (rate limited) answers of a trades upstream, per source (broker, vendor).", "source")
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("trades: register sluice_trades_vendor_429_total: %w", err)
	}
	return c, nil
}
