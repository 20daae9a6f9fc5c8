package ticks

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

// Every error type of the worker and the shipped sources has its
// sluice_ticks_source_errors_total series at 0 from the start, so that a
// rate()/increase() over it (the dashboard's source-errors panel) sees a
// process's first error of a type instead of a series that appears at 1.
func TestSourceErrorsExportedAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	types := []string{ErrTypeGatewayTimeout, ErrTypePacing, ErrTypeNoContract, ErrTypeStorage, ErrTypeUnknown, errTypeInternalTimeout}
	if n := testutil.CollectAndCount(m.sourceErrs); n != len(types) {
		t.Errorf("sluice_ticks_source_errors_total has %d series, want %d (one per type)", n, len(types))
	}
	var want strings.Builder
	want.WriteString("# HELP sluice_ticks_source_errors_total Failed tick-source calls and writes, per error type.\n# TYPE sluice_ticks_source_errors_total counter\n")
	for _, typ := range slices.Sorted(slices.Values(types)) {
		fmt.Fprintf(&want, "sluice_ticks_source_errors_total{type=%q} 0\n", typ)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "sluice_ticks_source_errors_total"); err != nil {
		t.Error(err)
	}
}
