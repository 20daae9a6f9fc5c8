package main

import (
	"math"
	"testing"

	"github.com/sluicehq/sluice/stages/run"
)

// sluice run's own process sets the default soft memory limit when nothing
// bounds its memory and derives the budget from it; in-process (tests) and
// with any limit or budget given it sets none.
func TestProcessBudget(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	none := run.MemoryLimits{GoMemLimit: math.MaxInt64}
	for _, tc := range []struct {
		name      string
		flag      int64
		owns      bool
		env       string
		limits    run.MemoryLimits
		budget    int64
		from      string
		softLimit int64
	}{
		{"own process, nothing set", 0, true, "", none, run.DefaultMemoryLimit / 100 * 35, "default GOMEMLIMIT", run.DefaultMemoryLimit},
		{"in-process, nothing set", 0, false, "", none, run.DefaultBudget, "default", 0},
		{"own process, GOMEMLIMIT", 0, true, "512MiB", run.MemoryLimits{GoMemLimit: 512 * mib}, 512 * mib / 100 * 35, "GOMEMLIMIT", 0},
		{"own process, cgroup", 0, true, "", run.MemoryLimits{GoMemLimit: math.MaxInt64, Cgroup: 1024 * mib}, 1024 * mib / 100 * 35, "cgroup", 0},
		{"own process, --memory-budget", 64 * mib, true, "", none, 64 * mib, "flag", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			budget, from, soft := processBudget(tc.flag, tc.owns, tc.env, tc.limits)
			if budget != tc.budget || from != tc.from || soft != tc.softLimit {
				t.Errorf("processBudget = %d, %q, soft limit %d; want %d, %q, %d", budget, from, soft, tc.budget, tc.from, tc.softLimit)
			}
		})
	}
}
