package ticks

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every job status has its sluice_ticks_job_transitions_total series at 0
// from the start. The shipped alert increase(…{status="FAILED"}[30m]) > 0
// missed a process's first failed job: the series appeared only then, at 1,
// and increase() needs a sample before the change.
func TestJobTransitionsExportedAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_ticks_job_transitions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	for _, s := range []Status{StatusPending, StatusRunning, StatusCompleted, StatusFailed, StatusStalled} {
		if v, ok := got[string(s)]; !ok || v != 0 {
			t.Errorf("sluice_ticks_job_transitions_total{status=%q}: %v (exported %t), want 0", s, v, ok)
		}
	}
}
