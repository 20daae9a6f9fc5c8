package run_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/stages/run"
)

// The counters with a fixed set of kinds are exported at 0 for every kind
// as soon as a runner exists: a series that appears only with its first
// error (at 1) makes increase()/rate() alerts, such as the shipped
// sluice_runtime_errors_total{kind="commit"} one, miss that error, and a
// scrape of /metrics did not show the names docs/observability.md lists.
func TestRuntimeCountersExportedAtZero(t *testing.T) {
	t.Parallel()
	withEachRunner(t, run.Config{Name: "p", Topics: []string{"in"}, DLQTopic: "in.dlq"}, func(t *testing.T, reg *prometheus.Registry) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]map[string]bool{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["pipeline"] != "p" || m.GetCounter() == nil || m.GetCounter().GetValue() != 0 {
					continue
				}
				if got[mf.GetName()] == nil {
					got[mf.GetName()] = map[string]bool{}
				}
				got[mf.GetName()][labels["kind"]] = true
			}
		}
		for name, kinds := range map[string][]string{
			"sluice_runtime_errors_total": {"fetch", "commit", "fatal", "abandoned", "restore", "claim"},
			"sluice_retries_total":        {"stage", "sink", "dlq"},
		} {
			for _, k := range kinds {
				if !got[name][k] {
					t.Errorf("%s{pipeline=\"p\",kind=%q} is not exported at 0 (exported: %v)", name, k, got[name])
				}
			}
		}
	})
}

// sluice_offsets_skipped_total has a series at 0 for every input topic as
// soon as a runner exists: a skip (retention passed a lagging group) is
// usually a single event, and the shipped increase() alert
// (SluiceRecordsSkipped) missed it when the series appeared only then.
func TestSkippedOffsetsExportedAtZero(t *testing.T) {
	t.Parallel()
	withEachRunner(t, run.Config{Name: "p", Topics: []string{"in", "in2"}, DLQTopic: "in.dlq"}, func(t *testing.T, reg *prometheus.Registry) {
		const want = `
# HELP sluice_offsets_skipped_total Offsets deleted from the log (retention, DeleteRecords) before the group consumed them, per topic: their records never reached the pipeline.
# TYPE sluice_offsets_skipped_total counter
sluice_offsets_skipped_total{pipeline="p",topic="in"} 0
sluice_offsets_skipped_total{pipeline="p",topic="in2"} 0
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_offsets_skipped_total"); err != nil {
			t.Error(err)
		}
	})
}
