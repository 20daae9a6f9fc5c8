package smap

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// analysis.finished is produced by the analytics runtime in the
// transactions that commit its input offsets: when those transactions
// abort (the analytics group's transactional offset commits refused as
// from a stale generation, a commit's end failing), their events are
// aborted with them and produced again in the next one, so a
// read_committed reader (the progress counter, this test) sees exactly one
// event per item, every one of them transactional, while read_uncommitted
// sees the aborted copies too; the project completes once with exact
// counts.
func TestAnalysisFinishedExactlyOnceAcrossAbortedCommits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testkit.NewPostgresServer(t), harnessOpts{fakeKafka: true})
	faults := testkit.InjectTxnFaults(h.k, h.cfg.AnalyticsGroup, 3)
	h.start(h.cfg)
	const n = 90
	h.createProject(ProjectCreated{ProjectID: "p-txn", Keywords: []string{"VF3"},
		Targets: []Target{synthetic("tiktok", 30), synthetic("facebook", 30), synthetic("youtube", 30)}})
	st := h.waitDone("p-txn", 60*time.Second)
	if st.Total != n || st.Done != n || st.Errors != 0 {
		t.Fatalf("final state %+v, want total = done = %d", st, n)
	}
	if !faults.Injected() {
		t.Fatalf("faults not injected: %d transactional offset commits, %d failed ends", faults.OffsetCommits.Load(), faults.FailedEnds.Load())
	}
	testkit.WaitFor(t, 30*time.Second, "analytics group to commit", func() bool {
		return h.caughtUp(h.cfg.AnalyticsGroup, h.cfg.DataCollectedTopic)
	})
	h.requireOncePerItem(h.cfg.AnalysisFinishedTopic, n, func(v []byte) (string, error) {
		e, err := DecodeAnalysisFinished(v)
		return e.Payload.ItemID, err
	})
	if cs := h.completions("p-txn"); len(cs) != 1 {
		t.Errorf("%d completions, want 1", len(cs))
	}
}
