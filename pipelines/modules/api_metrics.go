package modules

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// apiMetrics are the assembler's metrics.
type apiMetrics struct {
	assemble *prometheus.CounterVec // result: ok|degraded
	jobs     *prometheus.CounterVec // created: true|false
}

// newAPIMetrics registers the collectors on reg, or adopts equal ones
// already registered (two assemblers of one process share them).
func newAPIMetrics(reg prometheus.Registerer) (*apiMetrics, error) {
	f := promreg.Shared(reg)
	m := &apiMetrics{
		assemble: f.CounterVec("sluice_modules_assemble_total",
			"Assemble answers by result (ok, or degraded: synthesis dropped or refreshes not requested).", "result"),
		jobs: f.CounterVec("sluice_modules_jobs_total",
			"Analysis jobs got (created=false) or created (created=true) by assembles.", "created"),
	}
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("modules: assemble metrics: %w", err)
	}
	return m, nil
}
