package ticks

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/stages"
)

// checkBootstrap accepts a state in every job status — Bootstrap sends
// RUNNING or COMPLETED, and a replayed state of a PENDING, FAILED or
// STALLED job is applied as it is (chainTasks resumes the non-terminal
// ones) — and dead-letters any other status (sanity_fail, ticks.bootstrap):
// the worker would store it as the job's status, export it as a metric
// label, and the supervisor would never see the job as stalled.
func TestCheckBootstrapStatus(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 11, 18, 14, 30, 0, 0, time.UTC).UnixMilli()
	end := start + (6*time.Hour + 30*time.Minute).Milliseconds() - 1
	now := time.Date(2025, 11, 20, 0, 0, 0, 0, time.UTC)
	task := func(status Status) Task {
		st := JobState{JobKey: JobKey("NQ", "2025-11-18"), Symbol: "NQ", Date: "2025-11-18", AccountID: "U1", Status: status,
			JobInstanceID: uuid.NewString(), Cursor: start + 1000, StartTime: start, EndTime: end}
		if status == StatusCompleted {
			st.Cursor = end
		}
		return Task{Kind: KindBootstrap, JobKey: st.JobKey, Symbol: st.Symbol, Date: st.Date, JobInstanceID: st.JobInstanceID, AccountID: st.AccountID, State: &st}
	}
	cases := []struct {
		status Status
		ok     bool
	}{
		{StatusPending, true},
		{StatusRunning, true},
		{StatusCompleted, true},
		{StatusFailed, true},
		{StatusStalled, true},
		{"", false},
		{"DONE", false},
		{"running", false},
		{" RUNNING", false},
		{Status(strings.Repeat("X", 200)), false},
	}
	for _, c := range cases {
		err := checkBootstrap(task(c.status), now)
		if c.ok {
			if err != nil {
				t.Errorf("status %q refused: %v", c.status, err)
			}
			continue
		}
		e := stages.Classify(err)
		if err == nil || e.Kind != stages.KindDeadLetter || e.Reason != stages.ReasonSanityFail || e.Rule != RuleBootstrap {
			t.Errorf("status %.40q: %v (%+v), want a dead letter %s/%s", c.status, err, e, stages.ReasonSanityFail, RuleBootstrap)
			continue
		}
		if !strings.Contains(err.Error(), "status") || len(err.Error()) > 300 {
			t.Errorf("status %.40q: message %q does not name the status (clipped)", c.status, err)
		}
	}
}
