package trades_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/trades"
)

const since = "2025-01-01"

// A synthetic import of 500 trades runs its 5 pages in a chain: 500 rows,
// one trade.upserted per trade, import.progress after each page with the
// estimated percent, import.completed with the run's counts, and the state
// COMPLETED with the same counts.
func TestSyntheticImportCompletes(t *testing.T) {
	t.Parallel()
	f := newImportFixture(t, false, nil)
	f.start(t)
	cmd := importCmd("u1", since, trades.BrokerSynthetic, false, nil)
	f.send(t, "u1", cmd)
	evs := f.waitEvents(t, trades.TypeImportCompleted, 1)

	done := ofType[trades.ImportCompleted](t, evs, trades.TypeImportCompleted)
	want := trades.ImportCompleted{ImportID: cmd.ImportID(), RunID: done[0].RunID, UserID: "u1", Since: since, Pages: 5, Fetched: 500, Stored: 500, Rejected: 0}
	if len(done) != 1 || done[0] != want || done[0].RunID == "" {
		t.Fatalf("import.completed %+v, want one %+v", done, want)
	}
	ups := ofType[trades.TradeUpserted](t, evs, trades.TypeTradeUpserted)
	ids := map[string]bool{}
	for _, e := range evs {
		if e.Key != "u1" {
			t.Fatalf("event %s keyed %q, want the user", e.EventID, e.Key)
		}
		if e.Type == trades.TypeTradeUpserted {
			ids[e.EventID] = true
		}
	}
	if len(ups) != 500 || len(ids) != 500 {
		t.Fatalf("%d trade.upserted with %d distinct ids, want 500", len(ups), len(ids))
	}
	var percents []int
	for _, p := range ofType[trades.ImportProgress](t, evs, trades.TypeImportProgress) {
		percents = append(percents, p.Percent)
	}
	if got, want := percents, []int{50, 67, 75, 80, 100}; !equalInts(got, want) {
		t.Fatalf("progress percents %v, want %v", got, want)
	}
	if n := f.rowCount(t, "u1"); n != 500 {
		t.Fatalf("%d trades rows, want 500", n)
	}
	st := f.state(t, cmd.ImportID())
	if st.Status != trades.StatusCompleted || st.Page != 5 || st.Fetched != 500 || st.Stored != 500 || st.RunID != want.RunID || st.CompletedAt == nil {
		t.Fatalf("state %+v", st)
	}
	if got := f.metric(t, "sluice_trades_imports_total", "outcome", "completed"); got != 1 {
		t.Fatalf("imports_total{completed} = %v, want 1", got)
	}
	if got := f.metric(t, "sluice_trades_trades_total", "broker", "synthetic", "result", "stored"); got != 500 {
		t.Fatalf("trades_total{stored} = %v, want 500", got)
	}
	if got := f.metric(t, "sluice_trades_import_pages_total", "broker", "synthetic", "result", "stored"); got != 5 {
		t.Fatalf("import_pages_total{stored} = %v, want 5", got)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// An import that is RUNNING is not started again; one COMPLETED within the
// dedupe window is dropped as deduped unless forced; a forced one is a new
// run.
func TestImportDedupe(t *testing.T) {
	t.Parallel()
	f := newImportFixture(t, false, nil)
	f.start(t)
	cmd := importCmd("u2", since, trades.BrokerSynthetic, false, &trades.SyntheticOptions{Trades: 30, PageSize: 10})
	// Both commands precede page 1 in the partition: the second finds the
	// first RUNNING.
	f.send(t, "u2", cmd, cmd)
	f.waitEvents(t, trades.TypeImportCompleted, 1)
	f.send(t, "u2", cmd)
	testkit.WaitFor(t, 30*time.Second, "the third command deduped", func() bool {
		return f.metric(t, "sluice_trades_imports_total", "outcome", "deduped") == 1
	})
	first := f.state(t, cmd.ImportID())

	forced := cmd
	forced.Force = true
	f.send(t, "u2", forced)
	evs := f.waitEvents(t, trades.TypeImportCompleted, 2)
	done := ofType[trades.ImportCompleted](t, evs, trades.TypeImportCompleted)
	if len(done) != 2 || done[0].RunID != first.RunID || done[1].RunID == first.RunID || done[1].Stored != 30 {
		t.Fatalf("import.completed %+v: want the first run, then a new forced run of 30", done)
	}
	if got := f.metric(t, "sluice_trades_imports_total", "outcome", "started"); got != 2 {
		t.Fatalf("imports_total{started} = %v, want 2 (the running duplicate and the deduped one start nothing)", got)
	}
	if n := f.rowCount(t, "u2"); n != 30 {
		t.Fatalf("%d rows, want 30", n)
	}
}

// Pages are fenced by run_id: a page of another run, with the page number
// the current run expects next, is dropped (had it run, it would have
// fetched from its cursor, page 3, and the run would have fetched 300).
func TestPageFencedByRunID(t *testing.T) {
	t.Parallel()
	f := newImportFixture(t, false, nil)
	f.start(t)
	cmd := importCmd("u3", since, trades.BrokerSynthetic, false, nil)
	f.send(t, "u3", cmd)
	f.waitEvents(t, trades.TypeImportCompleted, 1)
	old := f.state(t, cmd.ImportID())

	forced := cmd
	forced.Force = true
	stale := trades.PageCommand{UserID: "u3", ImportID: cmd.ImportID(), RunID: old.RunID, Page: 1, Cursor: "3"}
	f.send(t, "u3", forced, stale)
	evs := f.waitEvents(t, trades.TypeImportCompleted, 2)
	done := ofType[trades.ImportCompleted](t, evs, trades.TypeImportCompleted)
	if done[1].RunID == old.RunID || done[1].Pages != 5 || done[1].Fetched != 500 {
		t.Fatalf("second run %+v, want 5 pages and 500 fetched", done[1])
	}
	perRun := map[string]int{}
	for _, p := range ofType[trades.ImportProgress](t, evs, trades.TypeImportProgress) {
		perRun[p.RunID]++
	}
	if perRun[old.RunID] != 5 || perRun[done[1].RunID] != 5 {
		t.Fatalf("progress events per run %v, want 5 each", perRun)
	}
}

// Every record of the import delivered again (the group's offsets reset to
// the start) adds nothing: the counts stay, no trade.upserted or progress
// event is repeated, and only the record that chained last re-sends its
// successor, import.completed with the same event id.
func TestRedeliveredPagesAddNothing(t *testing.T) {
	t.Parallel()
	f := newImportFixture(t, false, nil)
	stop := f.start(t)
	cmd := importCmd("u4", since, trades.BrokerSynthetic, false, &trades.SyntheticOptions{Trades: 50, PageSize: 10})
	f.send(t, "u4", cmd)
	before := f.waitEvents(t, trades.TypeImportCompleted, 1)
	st := f.state(t, cmd.ImportID())
	stop()

	adm := kadm.NewClient(f.k.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs := kadm.Offsets{}
	for p := int32(0); p < 3; p++ {
		offs.Add(kadm.Offset{Topic: f.cfg.ImportTopic, Partition: p, At: 0, LeaderEpoch: -1})
	}
	if _, err := adm.CommitOffsets(ctx, f.cfg.Group, offs); err != nil {
		t.Fatal(err)
	}
	f.reg = prometheus.NewRegistry() // the restarted service's metrics
	f.start(t)
	after := f.waitEvents(t, trades.TypeImportCompleted, 2)
	if n := len(after) - len(before); n != 1 {
		t.Fatalf("%d events after the redelivery, want 1 (import.completed again)", n)
	}
	last := after[len(after)-1]
	if last.Type != trades.TypeImportCompleted || last.EventID != trades.CompletedEventID(st.RunID) {
		t.Fatalf("re-sent event %s %s, want import.completed %s", last.Type, last.EventID, trades.CompletedEventID(st.RunID))
	}
	again := f.state(t, cmd.ImportID())
	if again.Fetched != 50 || again.Stored != 50 || again.Page != 5 || again.RunID != st.RunID {
		t.Fatalf("state after redelivery %+v, want the counts of one run", again)
	}
	if got := f.metric(t, "sluice_trades_import_pages_total", "broker", "synthetic", "result", "stored"); got != 0 {
		t.Fatalf("the restarted service stored %v pages, want 0", got)
	}
}

// A 429 waits Retry-After plus the safety margin and spends no attempt:
// with one attempt allowed the import still completes. A page whose rate
// limit is exhausted chains its successor with not_before.
func TestRateLimitWaitsWithoutAttempt(t *testing.T) {
	t.Parallel()
	f := newImportFixture(t, false, func(c *trades.ImportConfig) {
		c.Retry.MaxAttempts = 1
		c.RateLimitSafety = 10 * time.Millisecond
	})
	f.start(t)
	cmd := importCmd("u5", since, trades.BrokerSynthetic, false, &trades.SyntheticOptions{
		Trades: 40, PageSize: 10, HTTP429Page: 2, RetryAfterMS: 50, ExhaustPage: 3, ResetMS: 50,
	})
	f.send(t, "u5", cmd)
	evs := f.waitEvents(t, trades.TypeImportCompleted, 1)
	done := ofType[trades.ImportCompleted](t, evs, trades.TypeImportCompleted)
	if done[0].Stored != 40 || done[0].Pages != 4 {
		t.Fatalf("import.completed %+v, want 4 pages, 40 stored", done[0])
	}
	if got := f.metric(t, "sluice_trades_vendor_429_total", "source", "broker"); got != 1 {
		t.Fatalf("vendor_429_total{broker} = %v, want 1", got)
	}
	if got := f.metric(t, "sluice_runtime_waits_total"); got < 2 {
		t.Fatalf("runtime waits %v, want the 429 and the not_before wait", got)
	}
	var page4 *trades.PageCommand
	for _, r := range f.k.ReadTopic(t, f.cfg.ImportTopic) {
		c, err := trades.DecodeCommand(r.Key, r.Value)
		if err == nil && c.Kind == trades.KindPage && c.Page.Page == 4 {
			page4 = c.Page
		}
	}
	if page4 == nil || page4.NotBefore == nil {
		t.Fatalf("page 4 command %+v, want a not_before", page4)
	}
}

// Failed fetches are retried by the runtime; once they run out the run
// fails: import.failed {retries_exhausted, trades.broker_fetch}, the page
// dead-lettered with that reason and rule, state FAILED, earlier pages
// stored.
func TestFetchRetriesThenFails(t *testing.T) {
	t.Parallel()
	f := newImportFixture(t, false, nil)
	f.start(t)
	ok := importCmd("u6", since, trades.BrokerSynthetic, false, &trades.SyntheticOptions{Trades: 30, PageSize: 10, FailPage: 2, FailTimes: 2})
	bad := importCmd("u7", since, trades.BrokerSynthetic, false, &trades.SyntheticOptions{Trades: 30, PageSize: 10, FailPage: 2, FailTimes: 99})
	f.send(t, "u6", ok)
	f.send(t, "u7", bad)
	evs := f.waitEvents(t, trades.TypeImportFailed, 1)
	f.waitEvents(t, trades.TypeImportCompleted, 1)
	failed := ofType[trades.ImportFailed](t, evs, trades.TypeImportFailed)
	if len(failed) != 1 || failed[0].ImportID != bad.ImportID() || failed[0].Reason != "retries_exhausted" || failed[0].Rule != trades.RuleBrokerFetch {
		t.Fatalf("import.failed %+v", failed)
	}
	dl := f.waitDLQ(t, 1)
	if len(dl) != 1 || header(dl[0], "dlq.reason") != "retries_exhausted" || header(dl[0], "dlq.rule") != trades.RuleBrokerFetch ||
		header(dl[0], "dlq.stage") != trades.ImportName || header(dl[0], "dlq.attempts") != "6" {
		t.Fatalf("dead letters %d, first headers %v", len(dl), dl[0].Headers)
	}
	st := f.state(t, bad.ImportID())
	if st.Status != trades.StatusFailed || st.Rule != trades.RuleBrokerFetch || st.Stored != 10 {
		t.Fatalf("failed state %+v", st)
	}
	if n := f.rowCount(t, "u7"); n != 10 {
		t.Fatalf("u7 rows %d, want page 1's 10", n)
	}
	if n := f.rowCount(t, "u6"); n != 30 {
		t.Fatalf("u6 rows %d, want 30", n)
	}
	if got := f.metric(t, "sluice_trades_import_pages_total", "broker", "synthetic", "result", "retried"); got != 2+5 {
		t.Fatalf("pages retried %v, want 7", got)
	}
	if got := f.metric(t, "sluice_trades_imports_total", "outcome", "failed"); got != 1 {
		t.Fatalf("imports failed %v", got)
	}
}
