package ticks_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/stages"
)

// A bootstrap command (kcat can produce one on ingest.tasks) whose state
// or redundant files would make object keys no store accepts is refused
// as sanity_fail before anything is applied: it writes no job state, fails
// no job with reason exception, and does not block its partition (an
// invalid redundant key used to be retried by the runtime forever). The
// good jobs behind the bad commands complete.
func TestBadBootstrapRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	ctx := testkit.Context(t)
	sess := f.tradingHours(t, "NQ")
	boot := func(sym string, mod func(*ticks.Task)) []byte {
		st := ticks.JobState{JobKey: ticks.JobKey(sym, testDate), Symbol: sym, Date: testDate, AccountID: "U1", Status: ticks.StatusRunning,
			JobInstanceID: uuid.NewString(), Cursor: sess.Start - 1, StartTime: sess.Start, EndTime: sess.End}
		task := ticks.Task{Kind: ticks.KindBootstrap, JobKey: st.JobKey, Symbol: sym, Date: testDate, JobInstanceID: st.JobInstanceID, AccountID: "U1", State: &st}
		if mod != nil {
			mod(&task)
		}
		return taskJSON(t, task)
	}
	type bad struct {
		badTask
		partition int32
	}
	cases := []bad{
		{badTask{"state with an empty symbol", "BSE:" + testDate, boot("BSE", func(t *ticks.Task) { t.State.Symbol = "" }), stages.ReasonSanityFail, "ticks.bootstrap"}, 1},
		{badTask{"state with symbol ..", "BSD:" + testDate, boot("BSD", func(t *ticks.Task) { t.State.Symbol = ".." }), stages.ReasonSanityFail, "ticks.bootstrap"}, 1},
		{badTask{"state of another date", "BSO:" + testDate, boot("BSO", func(t *ticks.Task) { t.State.Date = "2025-11-19" }), stages.ReasonSanityFail, "ticks.bootstrap"}, 1},
		{badTask{"state instance not a UUID", "BSI:" + testDate, boot("BSI", func(t *ticks.Task) { t.State.JobInstanceID, t.JobInstanceID = `a\b`, `a\b` }), stages.ReasonSanityFail, "ticks.bootstrap"}, 1},
		{badTask{"state with a reversed session", "BSS:" + testDate, boot("BSS", func(t *ticks.Task) { t.State.StartTime, t.State.EndTime = sess.End, sess.Start }), stages.ReasonSanityFail, "ticks.session"}, 1},
		{badTask{"state with a bad account", "BSA:" + testDate, boot("BSA", func(t *ticks.Task) { t.State.AccountID = "U1 OR 1=1" }), stages.ReasonSanityFail, "ticks.account"}, 1},
		{badTask{"state cursor outside the session", "BSC:" + testDate, boot("BSC", func(t *ticks.Task) { t.State.Cursor = sess.End + 5 }), stages.ReasonSanityFail, "ticks.bootstrap"}, 1},
		{badTask{"state with an unknown status", "BSU:" + testDate, boot("BSU", func(t *ticks.Task) { t.State.Status = "DONE" }), stages.ReasonSanityFail, "ticks.bootstrap"}, 1},
		{badTask{"state without a status", "BSN:" + testDate, boot("BSN", func(t *ticks.Task) { t.State.Status = "" }), stages.ReasonSanityFail, "ticks.bootstrap"}, 2},
		{badTask{"gap outside the session", "BSG:" + testDate, boot("BSG", func(t *ticks.Task) { t.Gaps = [][2]int64{{sess.Start - 100, sess.Start - 1}} }), stages.ReasonSanityFail, "ticks.bootstrap"}, 1},
		{badTask{"invalid symbol", "b/s:" + testDate, boot("b/s", nil), stages.ReasonSanityFail, "ticks.symbol"}, 1},
		// Its segment keys would be ticks/../DATE/…: objstore.ErrInvalidKey,
		// and the job FAILED with reason exception.
		{badTask{"symbol ..", "..:" + testDate, boot("..", nil), stages.ReasonSanityFail, "ticks.symbol"}, 1},
		{badTask{"empty symbol", ":" + testDate, boot("", nil), stages.ReasonSanityFail, "ticks.symbol"}, 1},
		{badTask{"redundant key with ..", "BRD:" + testDate, boot("BRD", func(t *ticks.Task) {
			t.Redundant = []string{"ticks/BRD/" + testDate + "/../../x/part_1_" + uuid.NewString() + ".parquet"}
		}), stages.ReasonSanityFail, "ticks.bootstrap"}, 2},
		{badTask{"redundant key with a backslash", "BRB:" + testDate, boot("BRB", func(t *ticks.Task) {
			t.Redundant = []string{"ticks/BRB/" + testDate + `/part_1_a\b.parquet`}
		}), stages.ReasonSanityFail, "ticks.bootstrap"}, 2},
		{badTask{"redundant key too long", "BRL:" + testDate, boot("BRL", func(t *ticks.Task) {
			t.Redundant = []string{"ticks/BRL/" + testDate + "/part_1_" + strings.Repeat("a", 300) + ".parquet"}
		}), stages.ReasonSanityFail, "ticks.bootstrap"}, 2},
	}
	good := map[int32]ticks.Task{}
	for _, p := range []int32{1, 2} {
		sym := []string{"", "GA", "GB"}[p]
		good[p] = ticks.Task{Kind: ticks.KindTrigger, Symbol: sym, Date: testDate, JobKey: ticks.JobKey(sym, testDate), JobInstanceID: uuid.NewString(), AccountID: "U1", StartTime: sess.Start, EndTime: sess.End}
	}
	var recs []*kgo.Record
	want := map[string]badTask{}
	for _, c := range cases {
		recs = append(recs, &kgo.Record{Topic: f.cfg.TasksTopic, Partition: c.partition, Key: []byte(c.key), Value: c.value})
		want[c.key] = c.badTask
	}
	for p, g := range good {
		recs = append(recs, &kgo.Record{Topic: f.cfg.TasksTopic, Partition: p, Key: []byte(g.JobKey), Value: taskJSON(t, g)})
	}
	prod := f.k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	f.startWorker(t)
	for _, g := range good {
		// Waits at most 30 s: a blocked partition fails here.
		f.waitJob(t, g.JobKey, 30*time.Second, "good job "+g.JobKey+" COMPLETED behind the bad bootstraps",
			func(st *ticks.JobState) bool { return st.Status == ticks.StatusCompleted })
	}
	var dlq []*kgo.Record
	testkit.WaitFor(t, 20*time.Second, "every bad bootstrap dead-lettered", func() bool {
		dlq = f.k.ReadTopic(t, f.cfg.DLQTopic, testkit.ReadCommitted())
		return len(dlq) >= len(want)
	})
	checkDeadLetters(t, dlq, want, func(c badTask, _ *kgo.Record, h map[string]string) {
		if h[stages.HeaderReason] != string(c.reason) || h[stages.HeaderRule] != c.rule {
			t.Errorf("%s: reason %q rule %q (%s); want %q %q", c.name, h[stages.HeaderReason], h[stages.HeaderRule], h[stages.HeaderError], c.reason, c.rule)
		}
	})
	all, err := ticks.ReadJobs(ctx, f.env.Kafka, f.cfg.JobsTopic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, st := range ticks.Flatten(all) {
		if k != good[1].JobKey && k != good[2].JobKey {
			t.Errorf("a bad bootstrap wrote job state %.60q (status %s, last error %s)", k, st.Status, st.LastErrorType)
		}
	}
}

// A trigger for a session that has not ended is refused: the Coordinator
// answers 400 (the CLI prints the error) until SessionSettle after the
// session end and sends nothing, and the worker dead-letters a raw trigger
// command whose session ends after its clock (sanity_fail, ticks.session)
// instead of COMPLETING the job with the ticks up to now.
func TestTriggerBeforeSessionEnd(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	ctx := testkit.Context(t)
	sess := f.tradingHours(t, "NQ")
	end := time.UnixMilli(sess.End + 1)
	coordAt := func(now time.Time) *ticks.Coordinator {
		cfg := f.cfg
		cfg.Now = func() time.Time { return now }
		return ticks.NewCoordinator(f.k.Client(t), f.env.Kafka, cfg)
	}
	req := ticks.TriggerRequest{Symbol: "NQ", Date: testDate, AccountID: "U1"}
	for name, now := range map[string]time.Time{
		"before the session":          time.UnixMilli(sess.Start).Add(-time.Hour),
		"during the session":          time.UnixMilli(sess.Start).Add(10 * time.Second),
		"at its last millisecond":     time.UnixMilli(sess.End),
		"within SessionSettle of end": end.Add(30 * time.Second),
	} {
		_, err := coordAt(now).Trigger(ctx, req)
		var ie *ticks.InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "trigger it from "+end.Add(time.Minute).UTC().Format(time.RFC3339)) {
			t.Errorf("%s: Trigger err %v, want an InputError saying when the trigger is accepted", name, err)
		}
	}
	srv := httptest.NewServer(coordAt(time.UnixMilli(sess.Start).Add(10 * time.Second)).Routes()["POST /api/v1/ingest/trigger"])
	defer srv.Close()
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"symbol":"NQ","date":"`+testDate+`","account_id":"U1"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "has not ended") {
		t.Errorf("POST during the session: %d %s, want 400 saying the session has not ended", resp.StatusCode, body)
	}
	if n := testkit.EndOffsets(t, kadm.NewClient(f.k.Client(t)), f.cfg.TasksTopic); sumOffsets(n) != 0 {
		t.Fatalf("refused triggers sent %d commands", sumOffsets(n))
	}
	// SessionSettle after the end, the trigger is accepted.
	res, err := coordAt(end.Add(2*time.Minute)).Trigger(ctx, req)
	if err != nil {
		t.Fatalf("trigger after the session: %v", err)
	}

	// A raw trigger command for tomorrow's session (in the exchange's time
	// zone, so it has not ended whatever the time of day).
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no America/New_York zone:", err)
	}
	tomorrow := time.Now().In(ny).AddDate(0, 0, 1).Format(time.DateOnly)
	live, err := f.src.TradingHours(ctx, "LIVE", tomorrow)
	if err != nil {
		t.Fatal(err)
	}
	raw := ticks.Task{Kind: ticks.KindTrigger, Symbol: "LIVE", Date: tomorrow, JobKey: ticks.JobKey("LIVE", tomorrow), JobInstanceID: uuid.NewString(),
		AccountID: "U1", StartTime: live.Start, EndTime: live.End}
	if err := f.k.Client(t).ProduceSync(ctx, &kgo.Record{Topic: f.cfg.TasksTopic, Key: []byte(raw.JobKey), Value: taskJSON(t, raw)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	f.startWorker(t)
	f.waitJob(t, res.JobKey, 60*time.Second, "the accepted job COMPLETED", func(st *ticks.JobState) bool { return st.Status == ticks.StatusCompleted })
	var dlq []*kgo.Record
	testkit.WaitFor(t, 20*time.Second, "the raw trigger dead-lettered", func() bool {
		dlq = f.k.ReadTopic(t, f.cfg.DLQTopic, testkit.ReadCommitted())
		return len(dlq) > 0
	})
	if h := testkit.Headers(dlq[0]); len(dlq) != 1 || string(dlq[0].Key) != raw.JobKey || h[stages.HeaderReason] != string(stages.ReasonSanityFail) ||
		h[stages.HeaderRule] != "ticks.session" || !strings.Contains(h[stages.HeaderError], "ended") {
		t.Errorf("%d DLQ records, first %q %v; want the raw trigger as sanity_fail ticks.session", len(dlq), dlq[0].Key, h)
	}
	if st := f.job(t, raw.JobKey); st != nil {
		t.Errorf("the raw trigger wrote job state %+v", st)
	}
}

func sumOffsets(ends map[int32]int64) int64 {
	n := int64(0)
	for _, e := range ends {
		n += e
	}
	return n
}
