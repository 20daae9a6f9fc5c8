package modules

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// apiMetrics are the assembler's metrics.
type apiMetrics struct {
	// assemble counts answered assembles by result (ok|degraded).
	assemble *prometheus.CounterVec
	// jobs counts get_or_create_job calls by created (true|false).
	jobs *prometheus.CounterVec
}

func newAPIMetrics(reg prometheus.Registerer) (*apiMetrics, error) {
	assemble, err := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_modules_assemble_total", Help: "Assemble answers by result (ok, or degraded: synthesis dropped or refreshes not requested).",
	}, []string{"result"}))
	if err != nil {
		return nil, fmt.Errorf("modules: register sluice_modules_assemble_total: %w", err)
	}
	jobs, err := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_modules_jobs_total", Help: "Analysis jobs got (created=false) or created (created=true) by assembles.",
	}, []string{"created"}))
	if err != nil {
		return nil, fmt.Errorf("modules: register sluice_modules_jobs_total: %w", err)
	}
	return &apiMetrics{assemble: assemble, jobs: jobs}, nil
}
