package smap

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// The dead letters of failed analytics items are the runtime's: each is
// the original data.collected record with the standard DLQ headers
// (dlq.source.timestamp included), dlq.attempts is the record's attempt
// (the runtime's MaxAttempts for a raw object that kept failing to load,
// read once per attempt), and each is counted in
// sluice_dlq_records_by_reason_total and sluice_dlq_records_total of the
// smap-analytics pipeline with its reason and rule. The failed items still
// count as done (with an error).
func TestAnalyticsDeadLettersCounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testkit.NewPostgresServer(t), harnessOpts{})
	const project, n, attempts = "p-dlq-metrics", 12, 3
	h.cfg.Runtime.Retry = run.RetryPolicy{MaxAttempts: attempts, Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}
	key := func(i int) (string, string) {
		id := ItemID(project, "tiktok", "tiktok-"+pad(i))
		return id, ObjectKey("tiktok", id)
	}
	faulty := &faultyStore{Store: h.objects, corrupt: map[string]bool{}, drop: map[string]bool{}}
	reads := &getFaultStore{Store: faulty, fail: map[string]bool{}, gets: map[string]int{}, err: errors.New("503 Slow Down")}
	want := map[string][3]string{} // item id → reason, rule, attempts
	id, k := key(2)
	faulty.drop[k], want[id] = true, [3]string{string(stages.ReasonSanityFail), RuleObjectMissing, "1"}
	id, k = key(7)
	faulty.corrupt[k], want[id] = true, [3]string{string(stages.ReasonDecodeError), RuleRawJSON, "1"}
	readFails, readKey := key(9)
	reads.fail[readKey], want[readFails] = true, [3]string{string(stages.ReasonRetriesExhausted), RuleObjectRead, "3"}
	h.objects = reads
	d := h.start(h.cfg)
	h.createProject(ProjectCreated{ProjectID: project, Targets: []Target{synthetic("tiktok", n)}})
	if st := h.waitDone(project, 60*time.Second); st.Done != n || st.Total != n || st.Errors != int64(len(want)) {
		t.Fatalf("final state %+v, want done=total=%d errors=%d", st, n, len(want))
	}
	collected := map[string]string{} // item id → source timestamp header value
	for _, r := range h.k.ReadTopic(t, h.cfg.DataCollectedTopic) {
		collected[string(r.Key)], _ = stages.SourceTimestamp(r.Timestamp)
	}
	dlq := h.waitDLQ(len(want))
	if len(dlq) != len(want) {
		t.Fatalf("%d DLQ records, want %d", len(dlq), len(want))
	}
	counts := map[[2]string]float64{}
	for id, w := range want {
		r, ok := dlq[id]
		if !ok {
			t.Fatalf("no DLQ record for %s", id)
		}
		hs := testkit.Headers(r)
		if hs[stages.HeaderReason] != w[0] || hs[stages.HeaderRule] != w[1] || hs[stages.HeaderAttempts] != w[2] ||
			hs[stages.HeaderStage] != AnalyticsStageName || hs[stages.HeaderSourceTopic] != h.cfg.DataCollectedTopic ||
			hs[stages.HeaderSourceTimestamp] == "" || hs[stages.HeaderSourceTimestamp] != collected[id] {
			t.Errorf("DLQ headers of %s: %v; want reason %s, rule %s, %s attempt(s), stage %s, source timestamp %s",
				id, hs, w[0], w[1], w[2], AnalyticsStageName, collected[id])
		}
		counts[[2]string{w[0], w[1]}]++
	}
	for l, c := range counts {
		if got := testkit.Metric(t, d.reg, "sluice_dlq_records_by_reason_total", "pipeline", AnalyticsName, "reason", l[0]); got != c {
			t.Errorf("sluice_dlq_records_by_reason_total{pipeline=%s,reason=%s} = %v, want %v", AnalyticsName, l[0], got, c)
		}
		if got := testkit.Metric(t, d.reg, "sluice_dlq_records_total", "pipeline", AnalyticsName, "reason", l[0], "rule", l[1]); got != c {
			t.Errorf("sluice_dlq_records_total{pipeline=%s,reason=%s,rule=%s} = %v, want %v", AnalyticsName, l[0], l[1], got, c)
		}
	}
	if c := reads.count(readKey); c != attempts {
		t.Errorf("%d reads of %s, want one per attempt (%d)", c, readKey, attempts)
	}
	if v := testkit.Metric(t, d.reg, "smap_items_analysed_total", "result", string(stages.ReasonRetriesExhausted)); v != 1 {
		t.Errorf("smap_items_analysed_total{result=retries_exhausted} = %v, want 1", v)
	}
	if rows, failed := h.rows(project); rows != n || failed != len(want) {
		t.Errorf("post_analytics: %d rows, %d failed; want %d, %d", rows, failed, n, len(want))
	}
}
