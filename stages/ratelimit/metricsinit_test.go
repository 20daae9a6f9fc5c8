package ratelimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages/ratelimit"
)

// A limiter's source has its sluice_ratelimit_errors_total and
// sluice_ratelimit_decisions_total series at 0 as soon as the limiter is
// built, before any call: the shipped alert
// rate(sluice_ratelimit_errors_total[5m]) > 0 missed a process's first
// failed call when the series appeared only then, at 1. Limiters of two
// sources share a registry.
func TestLimiterCountersExportedAtZero(t *testing.T) {
	t.Parallel()
	r := testkit.NewRedis(t)
	reg := prometheus.NewRegistry()
	for _, source := range []string{"ib", "polygon"} {
		if _, err := ratelimit.New(context.Background(), r.Client, ratelimit.Config{Source: source, KeyPrefix: r.Prefix,
			Windows: []ratelimit.Window{{Size: time.Minute, Limit: 10}}}, reg); err != nil {
			t.Fatal(err)
		}
	}
	const want = `
# HELP sluice_ratelimit_errors_total Rate limiter calls that failed (Redis errors), per source.
# TYPE sluice_ratelimit_errors_total counter
sluice_ratelimit_errors_total{source="ib"} 0
sluice_ratelimit_errors_total{source="polygon"} 0
# HELP sluice_ratelimit_decisions_total Rate limiter decisions, per source and decision (allowed, denied).
# TYPE sluice_ratelimit_decisions_total counter
sluice_ratelimit_decisions_total{decision="allowed",source="ib"} 0
sluice_ratelimit_decisions_total{decision="denied",source="ib"} 0
sluice_ratelimit_decisions_total{decision="allowed",source="polygon"} 0
sluice_ratelimit_decisions_total{decision="denied",source="polygon"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_ratelimit_errors_total", "sluice_ratelimit_decisions_total"); err != nil {
		t.Error(err)
	}
}
