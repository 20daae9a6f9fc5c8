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

// A trigger for a session that has not ended is refused: the Coordinator
// answers 400 (the CLI prints the error) until SessionSettle after the
// session end and sends nothing, and the worker dead-letters a raw trigger
// command whose session ends after its clock (sanity_fail, ticks.session)
// instead of COMPLETING the job with the ticks up to now.
func TestTriggerBeforeSessionEnd(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	ctx := testkit.Context(t)
	sess, err := f.src.TradingHours(ctx, "NQ", testDate)
	if err != nil {
		t.Fatal(err)
	}
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
		dlq = f.k.ReadTopic(t, f.cfg.DLQTopic)
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
