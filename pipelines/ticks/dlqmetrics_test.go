package ticks_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/ratelimit"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A segment task that fails for good is dead-lettered by the runtime: the
// task record with the standard DLQ headers (dlq.attempts the runtime's
// attempt, dlq.source.timestamp the task record's timestamp), counted in
// sluice_dlq_records_by_reason_total and sluice_dlq_records_total of the
// ticks pipeline with its reason — retries_exhausted after Retry.MaxAttempts
// transient failures, exception at once for a permanent one — while the
// job's FAILED state is still written.
func TestSegmentDeadLettersCounted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{Fault: func(_ int64, symbol string, _ int64) error {
		if symbol == "PX" {
			return &ticks.SourceError{Type: ticks.ErrTypeUnknown, Err: errors.New("no security definition")}
		}
		return ticks.GatewayTimeout()
	}}, func(c *ticks.Config) { c.Retry.MaxAttempts = 2 })
	f.startWorker(t)
	want := map[string][2]string{} // job key → reason, attempts
	for sym, w := range map[string][2]string{
		"HG": {string(stages.ReasonRetriesExhausted), "2"},
		"PX": {string(stages.ReasonException), "1"},
	} {
		res := f.trigger(t, sym)
		f.waitJob(t, res.JobKey, 30*time.Second, sym+" FAILED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusFailed })
		want[res.JobKey] = w
	}
	var dlq []*kgo.Record
	testkit.WaitFor(t, 10*time.Second, "two dead letters", func() bool { dlq = f.k.ReadTopic(t, f.cfg.DLQTopic, testkit.ReadCommitted()); return len(dlq) >= 2 })
	if len(dlq) != 2 {
		t.Fatalf("DLQ holds %d records, want 2", len(dlq))
	}
	tasks := map[[2]int64]*kgo.Record{}
	for _, r := range f.k.ReadTopic(t, f.cfg.TasksTopic) {
		tasks[[2]int64{int64(r.Partition), r.Offset}] = r
	}
	for _, r := range dlq {
		hs := testkit.Headers(r)
		w, ok := want[string(r.Key)]
		if !ok {
			t.Fatalf("unexpected dead letter of %s", r.Key)
		}
		p, _ := strconv.ParseInt(hs[stages.HeaderSourcePartition], 10, 32)
		off, _ := strconv.ParseInt(hs[stages.HeaderSourceOffset], 10, 64)
		src := tasks[[2]int64{p, off}]
		if src == nil {
			t.Fatalf("dead letter of %s names %d/%d, not a task record", r.Key, p, off)
		}
		ts, _ := stages.SourceTimestamp(src.Timestamp)
		if string(r.Value) != string(src.Value) || hs[stages.HeaderReason] != w[0] || hs[stages.HeaderAttempts] != w[1] || hs[stages.HeaderRule] != "" ||
			hs[stages.HeaderStage] != "ticks/segment" || hs[stages.HeaderSourceTopic] != f.cfg.TasksTopic || hs[stages.HeaderSourceTimestamp] != ts {
			t.Errorf("dead letter of %s: %v; want the task record with reason %s, %s attempt(s), source timestamp %s", r.Key, hs, w[0], w[1], ts)
		}
	}
	for _, reason := range []stages.Reason{stages.ReasonRetriesExhausted, stages.ReasonException} {
		if got := testkit.Metric(t, f.reg, "sluice_dlq_records_by_reason_total", "pipeline", "ticks", "reason", string(reason)); got != 1 {
			t.Errorf("sluice_dlq_records_by_reason_total{pipeline=ticks,reason=%s} = %v, want 1", reason, got)
		}
		if got := testkit.Metric(t, f.reg, "sluice_dlq_records_total", "pipeline", "ticks", "reason", string(reason), "rule", ""); got != 1 {
			t.Errorf("sluice_dlq_records_total{pipeline=ticks,reason=%s,rule=\"\"} = %v, want 1", reason, got)
		}
	}
}

// Rate-limit denials are waits, not attempts: with one attempt per task
// and a limit that denies most requests, every segment of a job is still
// fetched and the job completes without a dead letter, the denials
// counted in sluice_runtime_waits_total.
func TestRateLimitDenialsSpendNoAttempt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, func(c *ticks.Config) {
		c.Retry.MaxAttempts = 1
		c.RateLimit.Windows = []ratelimit.Window{{Size: 200 * time.Millisecond, Limit: 1}}
		c.RateLimit.Backoff = ratelimit.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}
	})
	f.startWorker(t)
	res := f.trigger(t, "RL")
	f.waitJob(t, res.JobKey, 90*time.Second, "COMPLETED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusCompleted })
	f.checkExact(t, "RL", 0)
	if n := len(f.k.ReadTopic(t, f.cfg.DLQTopic, testkit.ReadCommitted())); n != 0 {
		t.Errorf("%d DLQ records, want none", n)
	}
	if got := testkit.Metric(t, f.reg, "sluice_runtime_waits_total", "pipeline", "ticks"); got < 1 {
		t.Errorf("sluice_runtime_waits_total{pipeline=ticks} = %v, want the denials counted", got)
	}
	if got := testkit.Metric(t, f.reg, "sluice_ratelimit_decisions_total", "decision", "denied"); got < 1 {
		t.Errorf("sluice_ratelimit_decisions_total{decision=denied} = %v, want denials", got)
	}
}
