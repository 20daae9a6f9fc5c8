package smap

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/progress"
)

// TestAcceptance runs the acceptance scenarios of issue 6 in parallel on
// one PostgreSQL server (a schema each), each with its own Kafka, Redis and
// object-store prefix.
func TestAcceptance(t *testing.T) {
	pgs := testkit.NewPostgresServer(t)
	t.Run("AnalyticsFasterThanCollector", func(t *testing.T) { t.Parallel(); testChickenAndEgg(t, pgs) })
	t.Run("ReplayChangesNothing", func(t *testing.T) { t.Parallel(); testReplay(t, pgs) })
	t.Run("FourConcurrentWorkers", func(t *testing.T) { t.Parallel(); testFourWorkers(t, pgs) })
	t.Run("PublishFailsOnce", func(t *testing.T) { t.Parallel(); testPublishFailsOnce(t, pgs) })
	t.Run("CrashBetweenDecisionAndPublish", func(t *testing.T) { t.Parallel(); testCrashAfterDecision(t, pgs) })
	t.Run("FailingItemsCountAsErrors", func(t *testing.T) { t.Parallel(); testFailingItems(t, pgs) })
	t.Run("RedisLostThenRebuild", func(t *testing.T) { t.Parallel(); testRedisLost(t, pgs) })
	t.Run("DemoScenario", func(t *testing.T) { t.Parallel(); testDemo(t, pgs) })
}

// The demo publishes a project of synthetic items and reports progress up
// to DONE.
func testDemo(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	d := h.start(h.cfg)
	var reports []Progress
	p, err := DemoScenario(testkit.Context(t), d.env, h.cfg, DemoOptions{ProjectID: "demo-1", Items: 200, Poll: 20 * time.Millisecond,
		Report: func(p Progress) { reports = append(reports, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != "DONE" || p.Total != 200 || p.Processed != 200 || p.Percent != 100 || len(reports) == 0 || reports[len(reports)-1] != p {
		t.Fatalf("demo ended with %+v after %d reports", p, len(reports))
	}
	if cs := h.completions("demo-1"); len(cs) != 1 {
		t.Fatalf("%d completions, want 1", len(cs))
	}
}

// A slow crawl of four targets: the total grows while the crawl goes on (a
// target's items are counted when it is crawled), but no item is
// announced, so none counted, before the seal (the announcements commit
// with the project.created offset, when the crawl ends); nothing completes
// before the seal and exactly one completion follows it. (Analytics
// catching up with a growing total, done = total before the seal, is the
// progress tracker's TestLifecycleChickenAndEgg.)
func testChickenAndEgg(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	h.cfg.Crawler = SchemeCrawler{Synthetic: &SyntheticCrawler{Delay: 120 * time.Millisecond}}
	d := h.start(h.cfg)
	const n = 20
	h.createProject(ProjectCreated{ProjectID: "p-slow", Keywords: []string{"VinFast", "VF3"}, Targets: []Target{
		synthetic("tiktok", n/4), synthetic("youtube", n/4), synthetic("facebook", n/4), synthetic("news", n/4)}})

	growing := false
	for st := h.state("p-slow"); st.Status != progress.StatusDone; st = h.state("p-slow") {
		if st.Sealed || st.Status == progress.StatusProcessingWait {
			break
		}
		if st.Total > 0 {
			growing = true
		}
		if st.Done != 0 || h.events(h.cfg.DataCollectedTopic) != 0 || h.count(h.cfg.JobCompletedTopic) != 0 {
			t.Fatalf("an item announced, counted or completed before the seal: state %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !growing {
		t.Fatalf("the total never grew during the crawl: the scenario did not happen")
	}
	st := h.waitDone("p-slow", 60*time.Second)
	if st.Total != n || st.Done != n || st.Errors != 0 {
		t.Fatalf("final state %+v", st)
	}
	cs := h.completions("p-slow")
	if len(cs) != 1 || cs[0].Total != n || cs[0].Done != n || cs[0].Errors != 0 {
		t.Fatalf("completions %+v, want one with total=done=%d", cs, n)
	}
	if rows, failed := h.rows("p-slow"); rows != n || failed != 0 {
		t.Fatalf("post_analytics has %d rows (%d failed), want %d", rows, failed, n)
	}

	// Every event matches its schema.
	set, err := schemas.Compile()
	if err != nil {
		t.Fatal(err)
	}
	for topic, schema := range map[string]string{
		h.cfg.ProjectCreatedTopic:   schemas.SmapProjectCreated,
		h.cfg.DataCollectedTopic:    schemas.SmapDataCollected,
		h.cfg.AnalysisFinishedTopic: schemas.SmapAnalysisFinished,
		h.cfg.JobCompletedTopic:     schemas.SmapJobCompleted,
	} {
		recs := h.k.ReadTopic(t, topic, testkit.ReadCommitted())
		if len(recs) == 0 {
			t.Fatalf("%s is empty", topic)
		}
		for _, r := range recs {
			if err := set.Validate(schema, r.Value); err != nil {
				t.Fatalf("%s record %s: %v", topic, r.Value, err)
			}
		}
	}
	// Raw objects are where data.collected says.
	var rawBytes int
	for _, r := range h.k.ReadTopic(t, h.cfg.DataCollectedTopic) {
		e, err := DecodeDataCollected(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Key) != e.Payload.ItemID || e.Payload.ObjectKey != "raw/"+e.Payload.Platform+"/"+e.Payload.ItemID+".json" {
			t.Fatalf("data.collected key %q object %q", r.Key, e.Payload.ObjectKey)
		}
		b, err := h.objects.Get(testkit.Context(t), e.Payload.ObjectKey)
		if err != nil {
			t.Fatalf("raw object: %v", err)
		}
		rawBytes += len(b)
		var raw RawItem
		if err := json.Unmarshal(b, &raw); err != nil || raw.ItemID != e.Payload.ItemID || raw.ProjectID != "p-slow" || raw.Text == "" {
			t.Fatalf("raw object %s: %v %+v", e.Payload.ObjectKey, err, raw)
		}
	}

	// The progress API.
	srv := httptest.NewServer(d.env.Ops.Handler())
	defer srv.Close()
	for _, c := range []struct {
		id   string
		code int
		want Progress
	}{
		{"p-slow", 200, Progress{ProjectID: "p-slow", Status: "DONE", Total: n, Processed: n, Percent: 100}},
		{"nope", 404, Progress{ProjectID: "nope", Status: "NOT_FOUND"}},
	} {
		resp, err := http.Get(srv.URL + "/api/v1/projects/" + c.id + "/progress")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got Progress
		if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != c.code || got != c.want {
			t.Fatalf("GET progress %s: %d %s, want %d %+v", c.id, resp.StatusCode, body, c.code, c.want)
		}
	}
	if v := testkit.Metric(t, d.reg, "smap_completions_published_total", "repeat", "false"); v != 1 {
		t.Errorf("smap_completions_published_total{repeat=false} = %v, want 1", v)
	}
	if v := testkit.Metric(t, d.reg, "smap_items_analysed_total", "result", "ok"); v < n {
		t.Errorf("smap_items_analysed_total{result=ok} = %v, want ≥ %d", v, n)
	}
	// Each service's object-store calls are counted under its name: the
	// collector stored every raw item (and the project meta), analytics
	// read every raw item back, and nothing failed.
	if v := testkit.Metric(t, d.reg, "sluice_objstore_operations_total", "pipeline", CollectorName, "op", "put", "result", "ok"); v < n+1 {
		t.Errorf("sluice_objstore_operations_total{pipeline=%s,op=put,result=ok} = %v, want ≥ %d", CollectorName, v, n+1)
	}
	if v := testkit.Metric(t, d.reg, "sluice_objstore_operations_total", "pipeline", AnalyticsName, "op", "get", "result", "ok"); v < n {
		t.Errorf("sluice_objstore_operations_total{pipeline=%s,op=get,result=ok} = %v, want ≥ %d", AnalyticsName, v, n)
	}
	if v := testkit.Metric(t, d.reg, "sluice_objstore_read_bytes_total", "pipeline", AnalyticsName); v < float64(rawBytes) {
		t.Errorf("sluice_objstore_read_bytes_total{pipeline=%s} = %v, want ≥ %d (the raw items' sizes)", AnalyticsName, v, rawBytes)
	}
	for _, res := range []string{"permanent_error", "transient_error"} {
		if v := testkit.Metric(t, d.reg, "sluice_objstore_operations_total", "result", res); v != 0 {
			t.Errorf("sluice_objstore_operations_total{result=%s} = %v, want 0", res, v)
		}
	}
}

// Replaying every topic with new consumer groups changes no count and
// publishes no second completion.
func testReplay(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	d := h.start(h.cfg)
	const n = 60
	h.createProject(ProjectCreated{ProjectID: "p-replay", Keywords: []string{"VF3"}, Targets: []Target{synthetic("facebook", 30), synthetic("tiktok", 30)}})
	before := h.waitDone("p-replay", 60*time.Second)
	if before.Done != n || before.Total != n {
		t.Fatalf("before replay: %+v", before)
	}
	testkit.WaitFor(t, 30*time.Second, "progress group to commit", func() bool { return h.caughtUp(h.cfg.ProgressGroup, h.cfg.AnalysisFinishedTopic) })
	d.stop()
	finishedBefore := h.events(h.cfg.AnalysisFinishedTopic)

	replay := h.cfg
	replay.CollectorGroup = testkit.Name(t, "col2")
	replay.AnalyticsGroup = testkit.Name(t, "ana2")
	replay.ProgressGroup = testkit.Name(t, "prg2")
	h.start(replay)
	testkit.WaitFor(t, 60*time.Second, "replay of data.collected", func() bool {
		return h.caughtUp(replay.AnalyticsGroup, replay.DataCollectedTopic) && h.events(replay.AnalysisFinishedTopic) >= 2*finishedBefore
	})
	testkit.WaitFor(t, 60*time.Second, "replay of analysis.finished", func() bool { return h.caughtUp(replay.ProgressGroup, replay.AnalysisFinishedTopic) })
	testkit.WaitFor(t, 30*time.Second, "replay of project.created", func() bool { return h.caughtUp(replay.CollectorGroup, replay.ProjectCreatedTopic) })

	after := h.state("p-replay")
	if after.Done != before.Done || after.Total != before.Total || after.Errors != before.Errors || after.Status != progress.StatusDone {
		t.Fatalf("replay changed the state: before %+v after %+v", before, after)
	}
	if cs := h.completions("p-replay"); len(cs) != 1 {
		t.Fatalf("%d completions after replay, want 1", len(cs))
	}
	if rows, _ := h.rows("p-replay"); rows != n {
		t.Fatalf("post_analytics has %d rows after replay, want %d", rows, n)
	}
	if c := h.events(h.cfg.DataCollectedTopic); c != n {
		t.Fatalf("data.collected has %d records, want %d (the DONE project must not be re-crawled)", c, n)
	}
}

// Two processes × two partitions each of data.collected: four concurrent
// analytics workers; counts are exact and one completion is published.
func testFourWorkers(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{collectedPartitions: 4, finishedPartitions: 4})
	h.cfg.Crawler = SchemeCrawler{Synthetic: &SyntheticCrawler{Delay: 2 * time.Millisecond}}
	a := h.start(h.cfg)
	testkit.WaitFor(t, 30*time.Second, "process A ready", a.ready)
	b := h.start(h.cfg)
	testkit.WaitFor(t, 30*time.Second, "process B ready", b.ready)
	testkit.WaitFor(t, 30*time.Second, "analytics partitions split 2/2", func() bool {
		return testkit.Metric(t, a.reg, "sluice_assigned_partitions", "pipeline", AnalyticsName) == 2 &&
			testkit.Metric(t, b.reg, "sluice_assigned_partitions", "pipeline", AnalyticsName) == 2
	})
	const n = 240
	h.createProject(ProjectCreated{ProjectID: "p-four", Keywords: []string{"VinFast"}, Targets: []Target{
		synthetic("tiktok", 80), synthetic("facebook", 80), synthetic("youtube", 80),
	}})
	st := h.waitDone("p-four", 90*time.Second)
	if st.Total != n || st.Done != n || st.Errors != 0 {
		t.Fatalf("final state %+v", st)
	}
	if cs := h.completions("p-four"); len(cs) != 1 || cs[0].Done != n {
		t.Fatalf("completions %+v, want exactly one with done=%d", cs, n)
	}
	if rows, _ := h.rows("p-four"); rows != n {
		t.Fatalf("post_analytics rows %d, want %d", rows, n)
	}
	ina := testkit.Metric(t, a.reg, "sluice_records_in_total", "pipeline", AnalyticsName)
	inb := testkit.Metric(t, b.reg, "sluice_records_in_total", "pipeline", AnalyticsName)
	if ina == 0 || inb == 0 || ina+inb < n {
		t.Fatalf("analytics records in: process A %v, process B %v; want both > 0 and ≥ %d in all", ina, inb, n)
	}
	t.Logf("process A analysed %v records, process B %v", ina, inb)
}

// The completion's produce fails once: the batch is retried and the
// completion is published exactly once.
func testPublishFailsOnce(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	var calls atomic.Int32
	h.cfg.beforePublish = func(context.Context, []progress.Completion) error {
		if calls.Add(1) == 1 {
			return errors.New("injected: broker unavailable")
		}
		return nil
	}
	h.start(h.cfg)
	h.createProject(ProjectCreated{ProjectID: "p-fail-once", Targets: []Target{synthetic("tiktok", 20)}})
	st := h.waitDone("p-fail-once", 60*time.Second)
	if st.Done != 20 || calls.Load() < 2 {
		t.Fatalf("state %+v after %d publish attempts", st, calls.Load())
	}
	if cs := h.completions("p-fail-once"); len(cs) != 1 {
		t.Fatalf("%d completions, want 1", len(cs))
	}
}

// The process dies between the completion decision and the publish; the
// restarted process publishes the completion, once.
func testCrashAfterDecision(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	h.cfg.Runtime.RevokeTimeout = 500 * time.Millisecond
	crashCfg := h.cfg
	decided := make(chan struct{})
	var once sync.Once
	crashCfg.afterDecision = func(ctx context.Context, c progress.Completion) error {
		once.Do(func() { close(decided) })
		<-ctx.Done() // hang until the process is killed
		return ctx.Err()
	}
	// Analysis waits for the seal, so that the decision is the counter's
	// (a project whose items were all counted before the seal completes at
	// the seal, in the collector).
	gate := make(chan struct{})
	crashCfg.Analyzers = append(Builtins(), gated{gate})
	d := h.start(crashCfg)
	h.createProject(ProjectCreated{ProjectID: "p-crash", Targets: []Target{synthetic("tiktok", 30)}})
	testkit.WaitFor(t, 60*time.Second, "the seal", func() bool { return h.state("p-crash").Sealed })
	close(gate)
	select {
	case <-decided:
	case <-time.After(60 * time.Second):
		t.Fatal("no completion decision within 60s")
	}
	d.stop() // the worker is abandoned after RevokeTimeout: nothing is committed or published
	st := h.state("p-crash")
	if !st.Pending || st.Status == progress.StatusDone || st.Done != 30 {
		t.Fatalf("after the crash: %+v, want a pending completion", st)
	}
	if c := h.count(h.cfg.JobCompletedTopic); c != 0 {
		t.Fatalf("%d completions published before the restart", c)
	}

	r := h.start(h.cfg)
	st = h.waitDone("p-crash", 60*time.Second)
	if st.Done != 30 || st.Total != 30 {
		t.Fatalf("after restart: %+v", st)
	}
	if cs := h.completions("p-crash"); len(cs) != 1 || cs[0].Done != 30 {
		t.Fatalf("completions %+v, want exactly one", cs)
	}
	if v := testkit.Metric(t, r.reg, "smap_completions_published_total", "repeat", "true"); v != 1 {
		t.Errorf("repeated completions = %v, want 1 (the recovered decision)", v)
	}
}

// gated blocks every analysis until its channel is closed.
type gated struct{ ch chan struct{} }

func (gated) Name() string { return "gated" }
func (g gated) Analyze(*Input, *Result) error {
	<-g.ch
	return nil
}

// faultyStore corrupts or drops the raw objects of chosen keys.
type faultyStore struct {
	objstore.Store
	corrupt, drop map[string]bool
}

func (f *faultyStore) Put(ctx context.Context, key string, data []byte, ct string) error {
	switch {
	case f.drop[key]:
		return nil
	case f.corrupt[key]:
		data = []byte(`{"item_id": "truncated`)
	}
	return f.Store.Put(ctx, key, data, ct)
}

// panicky panics on one source id.
type panicky struct{ sourceID string }

func (panicky) Name() string { return "panicky" }
func (p panicky) Analyze(in *Input, _ *Result) error {
	if in.Item.SourceID == p.sourceID {
		panic("injected analyser bug")
	}
	return nil
}

// Items whose raw object is missing or corrupt, or whose analysis panics,
// land in smap.analytics.errors with the DLQ headers, count in errors, and
// the project still reaches DONE at 100 %.
func testFailingItems(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	const project, n = "p-errors", 30
	key := func(i int) (string, string) {
		id := ItemID(project, "tiktok", "tiktok-"+pad(i))
		return id, ObjectKey("tiktok", id)
	}
	fs := &faultyStore{Store: h.objects, corrupt: map[string]bool{}, drop: map[string]bool{}}
	want := map[string]string{} // item id → dlq rule
	for _, i := range []int{2, 11, 23} {
		id, k := key(i)
		fs.drop[k] = true
		want[id] = RuleObjectMissing
	}
	for _, i := range []int{5, 17} {
		id, k := key(i)
		fs.corrupt[k] = true
		want[id] = RuleRawJSON
	}
	pid, _ := key(8)
	want[pid] = RuleAnalyzer + "panicky"
	h.objects = fs
	h.cfg.Analyzers = append(Builtins(), panicky{sourceID: "tiktok-" + pad(8)})
	h.start(h.cfg)
	h.createProject(ProjectCreated{ProjectID: project, Targets: []Target{synthetic("tiktok", n)}})
	st := h.waitDone(project, 60*time.Second)
	if st.Done != n || st.Total != n || st.Errors != int64(len(want)) || st.Percent() != 100 {
		t.Fatalf("final state %+v (percent %v), want done=total=%d errors=%d", st, st.Percent(), n, len(want))
	}
	if cs := h.completions(project); len(cs) != 1 || cs[0].Errors != int64(len(want)) {
		t.Fatalf("completions %+v", cs)
	}
	if rows, failed := h.rows(project); rows != n || failed != len(want) {
		t.Fatalf("post_analytics: %d rows, %d failed; want %d, %d", rows, failed, n, len(want))
	}
	collected := map[string][]byte{}
	for _, r := range h.k.ReadTopic(t, h.cfg.DataCollectedTopic) {
		collected[string(r.Key)] = r.Value
	}
	h.waitDLQ(len(want))
	dlq := h.k.ReadTopic(t, h.cfg.AnalyticsErrorsTopic)
	if len(dlq) != len(want) {
		t.Fatalf("%d DLQ records, want %d", len(dlq), len(want))
	}
	reasons := map[string]string{RuleObjectMissing: "sanity_fail", RuleRawJSON: "decode_error", RuleAnalyzer + "panicky": "exception"}
	for _, r := range dlq {
		id := string(r.Key)
		rule, ok := want[id]
		if !ok {
			t.Fatalf("unexpected DLQ record for %s", id)
		}
		if string(r.Value) != string(collected[id]) {
			t.Errorf("DLQ record %s does not keep the original value", id)
		}
		hs := testkit.Headers(r)
		if hs[stages.HeaderReason] != reasons[rule] || hs[stages.HeaderRule] != rule || hs[stages.HeaderStage] != AnalyticsStageName ||
			hs[stages.HeaderSourceTopic] != h.cfg.DataCollectedTopic || hs[stages.HeaderError] == "" || hs[stages.HeaderAttempts] == "" {
			t.Errorf("DLQ headers of %s: %v (want rule %s)", id, hs, rule)
		}
		if _, err := strconv.Atoi(hs[stages.HeaderSourcePartition]); err != nil {
			t.Errorf("dlq.source.partition %q", hs[stages.HeaderSourcePartition])
		}
		if _, err := strconv.ParseInt(hs[stages.HeaderSourceOffset], 10, 64); err != nil {
			t.Errorf("dlq.source.offset %q", hs[stages.HeaderSourceOffset])
		}
		if _, err := time.Parse(time.RFC3339, hs[stages.HeaderFailedAt]); err != nil {
			t.Errorf("dlq.failed_at %q", hs[stages.HeaderFailedAt])
		}
	}
	var errRows int
	if err := h.pg.Pool.QueryRow(testkit.Context(t), `SELECT count(*) FROM post_analytics WHERE project_id = $1 AND error_type IS NOT NULL AND error_msg <> '' AND sentiment_score IS NULL`, project).Scan(&errRows); err != nil || errRows != len(want) {
		t.Fatalf("error rows %d (%v), want %d", errRows, err, len(want))
	}
}

func pad(i int) string {
	s := strconv.Itoa(i)
	return strings.Repeat("0", 5-len(s)) + s
}

// Redis loses the project's keys mid-project (sealed, a third of its items
// analysed); rebuild-progress restores the counts from post_analytics and
// the sealed total from the project's meta object, and the project
// completes exactly once.
func testRedisLost(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	h.cfg.Crawler = SchemeCrawler{Synthetic: &SyntheticCrawler{Delay: 60 * time.Millisecond}}
	h.cfg.Runtime.Retry.MaxAttempts = 200 // the counter waits for the rebuild
	d := h.start(h.cfg)
	const project, n = "p-lost", 40
	h.createProject(ProjectCreated{ProjectID: project, Targets: []Target{synthetic("tiktok", n)}})
	testkit.WaitFor(t, 60*time.Second, "a third of the items processed", func() bool { return h.state(project).Done >= n/3 })
	ctx := testkit.Context(t)
	k := h.tr.Key(project)
	if err := h.redis.Client.Del(ctx, k, k+":items", k+":found").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the pipeline run on the lost state a little
	rows, _ := h.rows(project)         // analytics goes on: the rebuild sees at least these
	st, err := RebuildProgress(ctx, d.env, h.cfg, project)
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	if st.Done < int64(rows) || !st.Sealed || st.Total != n {
		t.Fatalf("rebuilt state %+v with %d rows in post_analytics", st, rows)
	}
	st = h.waitDone(project, 60*time.Second)
	if rows, failed := h.rows(project); st.Done != int64(rows) || st.Total != n || rows != n || st.Errors != int64(failed) {
		t.Fatalf("final state %+v, post_analytics %d rows (%d failed)", st, rows, failed)
	}
	if cs := h.completions(project); len(cs) != 1 {
		t.Fatalf("%d completions, want 1", len(cs))
	}
	// A rebuild of the finished project keeps it DONE and publishes nothing.
	if err := h.redis.Client.Del(ctx, k, k+":items", k+":found").Err(); err != nil {
		t.Fatal(err)
	}
	st, err = RebuildProgress(ctx, d.env, h.cfg, project)
	if err != nil || st.Status != progress.StatusDone || st.Done != n {
		t.Fatalf("rebuild of a completed project: %+v %v", st, err)
	}
	if cs := h.completions(project); len(cs) != 1 {
		t.Fatalf("%d completions after the second rebuild, want 1", len(cs))
	}
}
