package ticks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/ratelimit"
)

// A job triggered over HTTP ends COMPLETED and its Parquet files hold
// exactly the source's ticks; the tight limiter paused the partition on the
// way (denials counted) without failing anything.
func TestTriggeredJobCompletesWithExactTicks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, func(c *ticks.Config) {
		c.RateLimit.Windows = []ratelimit.Window{{Size: time.Second, Limit: 5}}
	})
	f.startWorker(t)
	srv := httptest.NewServer(mux(f.coord))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/api/v1/ingest/trigger", "application/json", strings.NewReader(`{"symbol":"NQ","date":"`+testDate+`","account_id":"U12345"}`))
	if err != nil {
		t.Fatal(err)
	}
	var res ticks.TriggerResult
	_ = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || uuid.Validate(res.JobInstanceID) != nil || res.JobKey != "NQ:"+testDate {
		t.Fatalf("trigger: %d %+v", resp.StatusCode, res)
	}
	st := f.waitJob(t, res.JobKey, 60*time.Second, "COMPLETED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusCompleted })
	segs := f.checkExact(t, "NQ", 0)
	all, _ := f.src.Ticks("NQ", testDate)
	if st.JobInstanceID != res.JobInstanceID || st.Cursor != st.EndTime || st.Ticks != int64(len(all)) || st.Segments != len(segs) || st.AccountID != "U12345" {
		t.Errorf("final state %+v; want instance %s, cursor = end, %d ticks in %d segments", st, res.JobInstanceID, len(all), len(segs))
	}
	for _, s := range segs {
		if s.Instance != res.JobInstanceID || s.Account != "U12345" {
			t.Errorf("segment %s written by %s/%s", s.Key, s.Instance, s.Account)
		}
	}
	if len(segs) < 10 {
		t.Errorf("%d segments, want ≥ 10 with 100-tick segments", len(segs))
	}
	if got := testkit.Metric(t, f.reg, "sluice_ticks_fetched_total"); got != float64(len(all)) {
		t.Errorf("ticks fetched metric %v, want %d", got, len(all))
	}
	if got := testkit.Metric(t, f.reg, "sluice_ticks_segments_total", "result", "written"); got != float64(len(segs)) {
		t.Errorf("segments written metric %v, want %d", got, len(segs))
	}
	if testkit.Metric(t, f.reg, "sluice_ratelimit_decisions_total", "decision", "denied") == 0 || testkit.Metric(t, f.reg, "sluice_ratelimit_decisions_total", "decision", "allowed") < float64(len(segs)) {
		t.Errorf("limiter metrics: allowed %v denied %v; want ≥ %d allowed and some denials at 5/s",
			testkit.Metric(t, f.reg, "sluice_ratelimit_decisions_total", "decision", "allowed"), testkit.Metric(t, f.reg, "sluice_ratelimit_decisions_total", "decision", "denied"), len(segs))
	}
	// The grants respected 5 per second (server-side sorted set).
	if n := testkit.Metric(t, f.reg, "sluice_dlq_records_total"); n != 0 {
		t.Errorf("%v records dead-lettered", n)
	}
	// The worker's object-store calls are counted on its registry: one Put
	// per segment file, with the files' bytes, and no failure.
	infos, err := f.store.List(testkit.Context(t), ticks.SegmentPrefix("NQ", testDate))
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, in := range infos {
		size += in.Size
	}
	if got := testkit.Metric(t, f.reg, "sluice_objstore_operations_total", "pipeline", "ticks", "op", "put", "result", "ok"); got != float64(len(segs)) || len(infos) != len(segs) {
		t.Errorf("sluice_objstore_operations_total{pipeline=ticks,op=put,result=ok} = %v, want %d (%d files)", got, len(segs), len(infos))
	}
	if got := testkit.Metric(t, f.reg, "sluice_objstore_written_bytes_total", "pipeline", "ticks"); got != float64(size) {
		t.Errorf("sluice_objstore_written_bytes_total{pipeline=ticks} = %v, want %d (the files' sizes)", got, size)
	}
	for _, res := range []string{"permanent_error", "transient_error"} {
		if got := testkit.Metric(t, f.reg, "sluice_objstore_operations_total", "pipeline", "ticks", "result", res); got != 0 {
			t.Errorf("sluice_objstore_operations_total{pipeline=ticks,result=%s} = %v, want 0", res, got)
		}
	}
}

func mux(c *ticks.Coordinator) http.Handler {
	m := http.NewServeMux()
	for p, h := range c.Routes() {
		m.Handle(p, h)
	}
	return m
}

func TestTriggerRejectsBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	srv := httptest.NewServer(mux(f.coord))
	defer srv.Close()
	for name, tc := range map[string]struct {
		body string
		code int
		msg  string
	}{
		"not json":        {`{`, 400, "JSON"},
		"unknown field":   {`{"symbol":"NQ","date":"2025-11-18","account_id":"U1","x":1}`, 400, "unknown field"},
		"lower symbol":    {`{"symbol":"nq","date":"2025-11-18","account_id":"U1"}`, 400, "symbol"},
		"missing symbol":  {`{"date":"2025-11-18","account_id":"U1"}`, 400, "symbol"},
		"bad date":        {`{"symbol":"NQ","date":"2025-13-01","account_id":"U1"}`, 400, "date"},
		"future date":     {`{"symbol":"NQ","date":"2999-01-01","account_id":"U1"}`, 400, "future"},
		"missing account": {`{"symbol":"NQ","date":"2025-11-18"}`, 400, "account_id"},
		"ok":              {`{"symbol":"NQ","date":"2025-11-18","account_id":"U1"}`, 202, "job_instance_id"},
	} {
		resp, err := http.Post(srv.URL+"/api/v1/ingest/trigger", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(b.String(), tc.msg) {
			t.Errorf("%s: %d %s; want %d mentioning %q", name, resp.StatusCode, b.String(), tc.code, tc.msg)
		}
	}
	// Only the valid request produced a command.
	recs := f.k.ReadTopic(t, f.cfg.TasksTopic)
	if len(recs) != 1 || string(recs[0].Key) != "NQ:2025-11-18" || !strings.Contains(string(recs[0].Value), `"kind":"trigger"`) {
		t.Fatalf("tasks topic holds %d records, want the one trigger", len(recs))
	}
	resp, _ := http.Get(srv.URL + "/api/v1/ingest/jobs/nope")
	if resp.StatusCode != 400 {
		t.Errorf("GET bad job key: %d, want 400", resp.StatusCode)
	}
	resp.Body.Close()
	resp, _ = http.Get(srv.URL + "/api/v1/ingest/jobs/NQ:2025-11-19")
	if resp.StatusCode != 404 {
		t.Errorf("GET unknown job: %d, want 404", resp.StatusCode)
	}
	resp.Body.Close()
}

// Behind the ops server's access rules, a trigger without the bearer
// token, with the wrong one, as text/plain, from a foreign origin or to a
// foreign Host name is refused before it reaches the coordinator; the
// allowed request is accepted and is the only command on the tasks topic.
func TestTriggerThroughGuardedOpsServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	const token = "ticks-test-token-5b2f0c"
	ops := opshttp.New(f.reg, f.env.Logger)
	for p, h := range f.coord.Routes() {
		ops.Handle(p, h)
	}
	ctx, cancel := context.WithCancel(testkit.Context(t))
	addr, errc, err := ops.ListenAndServe(ctx, opshttp.Listen{Addr: "127.0.0.1:0", Token: token})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("ops server: %v", err)
		}
	}()
	body := `{"symbol":"NQ","date":"2025-11-18","account_id":"U1"}`
	for _, tc := range []struct {
		name, host string
		headers    map[string]string
		code       int
	}{
		{"no token", "", map[string]string{"Content-Type": "application/json"}, http.StatusUnauthorized},
		{"wrong token", "", map[string]string{"Authorization": "Bearer nope", "Content-Type": "application/json"}, http.StatusUnauthorized},
		{"text/plain", "", map[string]string{"Authorization": "Bearer " + token, "Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
		{"foreign origin", "", map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json", "Origin": "https://evil.example"}, http.StatusForbidden},
		{"foreign host", "evil.example", map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"}, http.StatusMisdirectedRequest},
		{"allowed", "", map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"}, http.StatusAccepted},
	} {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr.String()+"/api/v1/ingest/trigger", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.host != "" {
			req.Host = tc.host
		}
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var res ticks.TriggerResult
		_ = json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.code)
		}
		if tc.code == http.StatusAccepted && (uuid.Validate(res.JobInstanceID) != nil || res.JobKey != "NQ:2025-11-18") {
			t.Errorf("%s: result %+v", tc.name, res)
		}
	}
	recs := f.k.ReadTopic(t, f.cfg.TasksTopic)
	if len(recs) != 1 || string(recs[0].Key) != "NQ:2025-11-18" || !strings.Contains(string(recs[0].Value), `"kind":"trigger"`) {
		t.Fatalf("tasks topic holds %d records, want the one allowed trigger", len(recs))
	}
}

// Re-triggering a running job: the old instance's queued tasks write
// nothing (no file, no state), the new instance completes exactly.
func TestRetriggerFencesOldInstance(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{Latency: 40 * time.Millisecond}, nil)
	f.startWorker(t)
	a := f.trigger(t, "ES")
	f.waitJob(t, a.JobKey, 30*time.Second, "instance A past 2 segments", func(s *ticks.JobState) bool { return s.Segments >= 2 })
	b := f.trigger(t, "ES")
	// A queued task of instance A at a start B never uses.
	zombieStart := a.StartTime + 7
	v, _ := json.Marshal(ticks.Task{Kind: ticks.KindSegment, JobKey: a.JobKey, Symbol: "ES", Date: testDate, JobInstanceID: a.JobInstanceID, AccountID: "U1", StartTs: zombieStart})
	if err := f.k.Client(t).ProduceSync(testkit.Context(t), &kgo.Record{Topic: f.cfg.TasksTopic, Key: []byte(a.JobKey), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	st := f.waitJob(t, b.JobKey, 60*time.Second, "instance B COMPLETED", func(s *ticks.JobState) bool {
		return s.JobInstanceID == b.JobInstanceID && s.Status == ticks.StatusCompleted
	})
	if st.Origin != "trigger" {
		t.Errorf("origin %q", st.Origin)
	}
	segs := f.checkExact(t, "ES", 0)
	for _, s := range segs {
		if s.Instance != b.JobInstanceID {
			t.Errorf("final file %s is not instance B's", s.Key)
		}
	}
	if bad := hasInstance(f.store.Puts(), a.JobInstanceID+"_zz"); len(bad) > 0 {
		t.Errorf("unexpected puts %v", bad)
	}
	for _, k := range f.store.Puts() {
		if strings.Contains(k, fmt.Sprintf("part_%d_", zombieStart)) {
			t.Errorf("the zombie task wrote %s", k)
		}
	}
	if testkit.Metric(t, f.reg, "sluice_ticks_zombie_tasks_total") < 1 {
		t.Error("no zombie task counted")
	}
	// In the state log, once B appears, A never does again.
	seenB := false
	for _, r := range f.k.ReadTopic(t, f.cfg.JobsTopic) {
		s := decodeState(t, r)
		switch s.JobInstanceID {
		case b.JobInstanceID:
			seenB = true
		case a.JobInstanceID:
			if seenB {
				t.Errorf("instance A wrote state after B: %+v", s)
			}
		}
	}
	if !seenB {
		t.Error("no state of instance B")
	}
}

// Killing the worker mid-job: another member of the group restores the
// state and resumes from the cursor; the final files are exact.
func TestWorkerRestartResumesFromCursor(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{Latency: 30 * time.Millisecond}, nil)
	stop1 := f.startWorker(t)
	res := f.trigger(t, "CL")
	f.waitJob(t, res.JobKey, 30*time.Second, "3 segments", func(s *ticks.JobState) bool { return s.Segments >= 3 })
	stop1()
	mid := f.job(t, res.JobKey)
	callsBefore := f.src.Calls()
	if mid.Status == ticks.StatusCompleted {
		t.Fatal("job completed before the worker stopped; make the session longer")
	}
	f.startWorker(t)
	st := f.waitJob(t, res.JobKey, 60*time.Second, "COMPLETED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusCompleted })
	segs := f.checkExact(t, "CL", 0)
	if st.JobInstanceID != res.JobInstanceID || st.Segments != len(segs) {
		t.Errorf("final state %+v, want instance %s and %d segments", st, res.JobInstanceID, len(segs))
	}
	// The second worker fetched only what was left after the cursor (plus
	// at most the one segment in flight when the first stopped).
	left := 0
	for _, s := range segs {
		if s.RangeStart > mid.Cursor {
			left++
		}
	}
	if after := f.src.Calls() - callsBefore; after > int64(left)+1 {
		t.Errorf("second worker made %d source calls, want ≤ %d (resume from cursor %d)", after, left+1, mid.Cursor)
	}
}

// Deleting a middle file and the job state, then bootstrapping: the state
// is rebuilt from the file names and a backfill task restores exactly the
// missing range without moving the cursor.
func TestBootstrapBackfillsMissingRange(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	stop := f.startWorker(t)
	res := f.trigger(t, "GC")
	f.waitJob(t, res.JobKey, 60*time.Second, "COMPLETED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusCompleted })
	stop()
	segs := f.checkExact(t, "GC", 0)
	victim := segs[len(segs)/2]
	ctx := testkit.Context(t)
	if err := f.store.Delete(ctx, victim.Key); err != nil {
		t.Fatal(err)
	}
	// Tombstone the state (same partitioner as every producer: by key).
	if err := f.k.Client(t).ProduceSync(ctx, &kgo.Record{Topic: f.cfg.JobsTopic, Key: []byte(res.JobKey)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if st := f.job(t, res.JobKey); st != nil {
		t.Fatalf("state still there after the tombstone: %+v", st)
	}
	jobsBefore := len(f.k.ReadTopic(t, f.cfg.JobsTopic))
	f.startWorker(t)
	sup := ticks.NewSupervisor(f.cfg, f.coord, f.store, testLogger(t))
	rep, err := sup.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rep.Rebuilt) != "["+res.JobKey+"]" || rep.Gaps != 1 {
		t.Fatalf("bootstrap report %+v, want one job with one gap", rep)
	}
	st := f.waitJob(t, res.JobKey, 30*time.Second, "backfill done", func(s *ticks.JobState) bool { return s.Backfills >= 1 })
	if st.Status != ticks.StatusCompleted || st.Cursor != st.EndTime || st.JobInstanceID != res.JobInstanceID || st.Origin != "bootstrap" {
		t.Errorf("rebuilt state %+v; want COMPLETED at the session end, instance %s", st, res.JobInstanceID)
	}
	after := f.checkExact(t, "GC", 0)
	var restored *ticks.Segment
	for i := range after {
		if after[i].Key == victim.Key {
			restored = &after[i]
		}
	}
	if restored == nil || restored.RangeStart != victim.RangeStart || restored.RangeEnd != victim.RangeEnd || restored.Rows != victim.Rows {
		t.Errorf("restored %+v, want the deleted segment %+v", restored, victim)
	}
	// No state written since the bootstrap moved the cursor.
	for _, r := range f.k.ReadTopic(t, f.cfg.JobsTopic)[jobsBefore:] {
		if s := decodeState(t, r); s.Cursor != st.EndTime {
			t.Errorf("state record with cursor %d during the backfill, want %d", s.Cursor, st.EndTime)
		}
	}
	// Bootstrapping again does nothing: the state exists.
	if rep, err := sup.Bootstrap(ctx); err != nil || len(rep.Rebuilt) != 0 {
		t.Errorf("second bootstrap %+v, %v; want nothing rebuilt", rep, err)
	}
}

// Injected 504s and pacing violations are retried and the job completes.
func TestTransientSourceErrorsRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{Fault: func(call int64, _ string, _ int64) error {
		switch call % 4 {
		case 1:
			return ticks.GatewayTimeout()
		case 3:
			if call < 12 {
				return ticks.PacingViolation()
			}
		}
		return nil
	}}, func(c *ticks.Config) { c.PacingBackoff = 50 * time.Millisecond })
	f.startWorker(t)
	res := f.trigger(t, "ZB")
	st := f.waitJob(t, res.JobKey, 90*time.Second, "COMPLETED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusCompleted })
	f.checkExact(t, "ZB", 0)
	if st.LastErrorType == "" {
		t.Error("no last_error_type recorded")
	}
	if testkit.Metric(t, f.reg, "sluice_ticks_source_errors_total", "type", "IB_504") < 3 || testkit.Metric(t, f.reg, "sluice_ticks_source_errors_total", "type", "PACING_VIOLATION") < 1 {
		t.Errorf("source error metrics: 504 %v, pacing %v", testkit.Metric(t, f.reg, "sluice_ticks_source_errors_total", "type", "IB_504"), testkit.Metric(t, f.reg, "sluice_ticks_source_errors_total", "type", "PACING_VIOLATION"))
	}
	if n := len(f.k.ReadTopic(t, f.cfg.DLQTopic, testkit.ReadCommitted())); n != 0 {
		t.Errorf("%d DLQ records", n)
	}
}

// A source that always fails: the task ends in ingest.dlq with
// retries_exhausted and the job is FAILED with last_error_type.
func TestAlwaysFailingSourceDeadLetters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{Fault: func(int64, string, int64) error { return ticks.GatewayTimeout() }}, func(c *ticks.Config) {
		c.Retry.MaxAttempts = 3
	})
	f.startWorker(t)
	res := f.trigger(t, "HG")
	st := f.waitJob(t, res.JobKey, 30*time.Second, "FAILED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusFailed })
	if st.LastErrorType != ticks.ErrTypeGatewayTimeout || st.Cursor != st.StartTime-1 {
		t.Errorf("failed state %+v; want last_error_type IB_504 and an unmoved cursor", st)
	}
	var dlq []*kgo.Record
	testkit.WaitFor(t, 10*time.Second, "DLQ record", func() bool { dlq = f.k.ReadTopic(t, f.cfg.DLQTopic, testkit.ReadCommitted()); return len(dlq) > 0 })
	r := dlq[0]
	var task ticks.Task
	_ = json.Unmarshal(r.Value, &task)
	if len(dlq) != 1 || string(r.Key) != res.JobKey || task.Kind != ticks.KindSegment || task.StartTs != res.StartTime || task.JobInstanceID != res.JobInstanceID {
		t.Fatalf("DLQ holds %d records, first %s=%s", len(dlq), r.Key, r.Value)
	}
	for h, want := range map[string]string{
		stages.HeaderReason: string(stages.ReasonRetriesExhausted), stages.HeaderAttempts: "3",
		stages.HeaderSourceTopic: f.cfg.TasksTopic, stages.HeaderStage: "ticks/segment", stages.HeaderRule: "",
	} {
		if got, _ := testkit.Header(r, h); got != want {
			t.Errorf("header %s = %q, want %q", h, got, want)
		}
	}
	errHeader, _ := testkit.Header(r, stages.HeaderError)
	failedAt, _ := testkit.Header(r, stages.HeaderFailedAt)
	sourceOffset, _ := testkit.Header(r, stages.HeaderSourceOffset)
	if !strings.Contains(errHeader, "504") || failedAt == "" || sourceOffset == "" {
		t.Errorf("headers %v", r.Headers)
	}
	if n := f.src.Calls(); n != 3 {
		t.Errorf("%d source calls, want 3 attempts", n)
	}
}

// A job whose heartbeat is too old is marked STALLED by the supervisor and
// re-triggered from its cursor under a new instance.
func TestStalledJobRetriggeredFromCursor(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, func(c *ticks.Config) {
		c.Supervisor = ticks.SupervisorConfig{Enabled: true, StallAfter: time.Minute, Retrigger: true}
	})
	sess, _ := f.src.TradingHours(context.Background(), "SI", testDate)
	cursor := sess.Start + 30_000
	old := uuid.NewString()
	stale := ticks.JobState{JobKey: "SI:" + testDate, Symbol: "SI", Date: testDate, AccountID: "U1", Status: ticks.StatusRunning,
		JobInstanceID: old, Cursor: cursor, StartTime: sess.Start, EndTime: sess.End, HeartbeatAt: time.Now().Add(-time.Hour).UnixMilli()}
	v, _ := json.Marshal(stale)
	ctx := testkit.Context(t)
	if err := f.k.Client(t).ProduceSync(ctx, &kgo.Record{Topic: f.cfg.JobsTopic, Key: []byte(stale.JobKey), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	f.startWorker(t)
	sup := ticks.NewSupervisor(f.cfg, f.coord, f.store, testLogger(t))
	keys, err := sup.ScanStalls(ctx)
	if err != nil || fmt.Sprint(keys) != "["+stale.JobKey+"]" {
		t.Fatalf("ScanStalls = %v, %v", keys, err)
	}
	st := f.waitJob(t, stale.JobKey, 60*time.Second, "new instance COMPLETED", func(s *ticks.JobState) bool {
		return s.JobInstanceID != old && s.Status == ticks.StatusCompleted
	})
	if st.Origin != "retrigger" || st.StartTime != sess.Start {
		t.Errorf("final state %+v", st)
	}
	f.checkExact(t, "SI", cursor+1)
	var statuses []string
	for _, r := range f.k.ReadTopic(t, f.cfg.JobsTopic) {
		s := decodeState(t, r)
		statuses = append(statuses, string(s.Status))
	}
	if !strings.Contains(strings.Join(statuses, ","), "RUNNING,STALLED,PENDING") {
		t.Errorf("state history %v, want RUNNING,STALLED,PENDING,…", statuses)
	}
	if testkit.Metric(t, f.reg, "sluice_ticks_stalled_jobs_total") != 1 {
		t.Errorf("stalled metric %v", testkit.Metric(t, f.reg, "sluice_ticks_stalled_jobs_total"))
	}
	// A fresh heartbeat is not stalled.
	if keys, err := sup.ScanStalls(ctx); err != nil || len(keys) != 0 {
		t.Errorf("second scan %v, %v", keys, err)
	}
}

// Idempotency: a readable file of the same instance skips the fetch; a file
// of another instance at the same start is replaced.
func TestSegmentFilesIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	ctx := testkit.Context(t)
	sess, _ := f.src.TradingHours(ctx, "YM", testDate)
	inst, other := uuid.NewString(), uuid.NewString()
	// Pre-write the first segment of inst exactly as the worker would, and a
	// file of another instance at the second segment's start.
	first, err := f.src.HistoricalTicks(ctx, "YM", sess.Start, sess.End, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := ticks.WriteSegmentForTest(ctx, f.store, "YM", testDate, inst, "U1", sess.Start, first[len(first)-1].TimeMs, false, first); err != nil {
		t.Fatal(err)
	}
	secondStart := first[len(first)-1].TimeMs + 1
	if err := ticks.WriteSegmentForTest(ctx, f.store, "YM", testDate, other, "U1", secondStart, secondStart+5, false, first[:1]); err != nil {
		t.Fatal(err)
	}
	calls0 := f.src.Calls()
	f.startWorker(t)
	v, _ := json.Marshal(ticks.Task{Kind: ticks.KindTrigger, JobKey: "YM:" + testDate, Symbol: "YM", Date: testDate, JobInstanceID: inst, AccountID: "U1", StartTime: sess.Start, EndTime: sess.End})
	if err := f.k.Client(t).ProduceSync(ctx, &kgo.Record{Topic: f.cfg.TasksTopic, Key: []byte("YM:" + testDate), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	st := f.waitJob(t, "YM:"+testDate, 60*time.Second, "COMPLETED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusCompleted })
	segs := f.checkExact(t, "YM", 0)
	if got := f.src.Calls() - calls0; got != int64(len(segs)-1) {
		t.Errorf("%d source calls for %d segments, want the first skipped", got, len(segs))
	}
	if testkit.Metric(t, f.reg, "sluice_ticks_segments_total", "result", "skipped") != 1 || testkit.Metric(t, f.reg, "sluice_ticks_foreign_segments_replaced_total") != 1 {
		t.Errorf("skipped %v, replaced %v; want 1 and 1", testkit.Metric(t, f.reg, "sluice_ticks_segments_total", "result", "skipped"), testkit.Metric(t, f.reg, "sluice_ticks_foreign_segments_replaced_total"))
	}
	if st.Ticks != int64(len(mustTicks(t, f, "YM"))) {
		t.Errorf("state counts %d ticks", st.Ticks)
	}
}

func mustTicks(t *testing.T, f *fixture, sym string) []ticks.Tick {
	ts, err := f.src.Ticks(sym, testDate)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
