package smap

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/progress"
)

// TestRobustness feeds bad and odd records to every smap input topic: each
// one is dead-lettered with a clear reason and rule (or counted as a failed
// item, when it can be attributed to a project), and never blocks the
// good records behind it.
func TestRobustness(t *testing.T) {
	pgs := testkit.NewPostgresServer(t)
	t.Run("BadRecordsOnEveryTopic", func(t *testing.T) { t.Parallel(); testBadRecords(t, pgs) })
	t.Run("AbsurdEngagementCounts", func(t *testing.T) { t.Parallel(); testAbsurdCounts(t, pgs) })
	t.Run("NULAndLongIdentifiers", func(t *testing.T) { t.Parallel(); testNULAndLongIDs(t, pgs) })
}

// fixedCrawler emits the given items for every target.
func fixedCrawler(items ...Item) Crawler {
	return crawlerFunc(func(_ context.Context, _ ProjectCreated, _ Target, emit func(Item) error) error {
		for _, it := range items {
			if err := emit(it); err != nil {
				return err
			}
		}
		return nil
	})
}

// nanAnalyzer sets a NaN sentiment score on one item, like a buggy
// custom analyser.
type nanAnalyzer struct{ sourceID string }

func (nanAnalyzer) Name() string { return "nan" }
func (a nanAnalyzer) Analyze(in *Input, res *Result) error {
	if in.Item.SourceID == a.sourceID {
		res.SentimentScore = math.NaN()
	}
	return nil
}

// dlqByKey returns the smap DLQ records by key.
// waitDLQ waits until a read_committed reader sees n records on the
// analytics errors topic (their transaction commits after the batch whose
// progress counters already moved) and returns them by key, as dlqByKey.
func (h *harness) waitDLQ(n int) map[string]*kgo.Record {
	testkit.WaitFor(h.t, 30*time.Second, fmt.Sprintf("%d committed DLQ records", n), func() bool {
		return len(h.k.ReadTopic(h.t, h.cfg.AnalyticsErrorsTopic, kgo.FetchIsolationLevel(kgo.ReadCommitted()))) >= n
	})
	return h.dlqByKey()
}

func (h *harness) dlqByKey() map[string]*kgo.Record {
	out := map[string]*kgo.Record{}
	for _, r := range h.k.ReadTopic(h.t, h.cfg.AnalyticsErrorsTopic) {
		if _, dup := out[string(r.Key)]; dup {
			h.t.Errorf("two DLQ records for key %q", r.Key)
		}
		out[string(r.Key)] = r
	}
	return out
}

type badRecord struct {
	topic, key string
	value      []byte
	stage      string
	reason     stages.Reason
	rule       string
}

func (h *harness) produceBad(recs []badRecord) {
	h.t.Helper()
	for _, b := range recs {
		if err := h.cl.ProduceSync(testkit.Context(h.t), &kgo.Record{Topic: b.topic, Key: []byte(b.key), Value: b.value}).FirstErr(); err != nil {
			h.t.Fatalf("produce %s: %v", b.key, err)
		}
	}
}

func (h *harness) checkDLQ(recs []badRecord) {
	h.t.Helper()
	want := 0
	for _, b := range recs {
		if b.reason != "" {
			want++
		}
	}
	var got map[string]*kgo.Record
	testkit.WaitFor(h.t, 30*time.Second, fmt.Sprintf("%d dead letters", want), func() bool {
		got = h.dlqByKey()
		return len(got) >= want
	})
	for _, b := range recs {
		r, ok := got[b.key]
		if b.reason == "" {
			if ok {
				h.t.Errorf("%.40q: dead-lettered, want it processed", b.key)
			}
			continue
		}
		if !ok {
			h.t.Errorf("%.40q: no DLQ record", b.key)
			continue
		}
		hs := testkit.Headers(r)
		if hs[stages.HeaderReason] != string(b.reason) || hs[stages.HeaderRule] != b.rule || hs[stages.HeaderStage] != b.stage ||
			hs[stages.HeaderSourceTopic] != b.topic || hs[stages.HeaderError] == "" || string(r.Value) != string(b.value) {
			h.t.Errorf("%.40q: DLQ headers %v; want reason %s rule %q stage %s source %s and the original value",
				b.key, hs, b.reason, b.rule, b.stage, b.topic)
		}
	}
}

// Tombstones, empty values, invalid JSON, wrong types and missing fields
// on the three input topics are dead-lettered as decode_error by the
// service that reads them, are not counted, and the project created after
// them completes exactly.
func testBadRecords(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{collectedPartitions: 1, finishedPartitions: 1})
	pc, dc, af := h.cfg.ProjectCreatedTopic, h.cfg.DataCollectedTopic, h.cfg.AnalysisFinishedTopic
	col, ana, prg := CollectorName+"/decode", AnalyticsName+"/decode", ProgressName+"/decode"
	de := stages.ReasonDecodeError
	bad := []badRecord{
		{pc, "pc-tombstone", nil, col, de, ""},
		{pc, "pc-empty", []byte{}, col, de, ""},
		{pc, "pc-json", []byte(`{"payload":`), col, de, ""},
		{pc, "pc-types", []byte(`{"event_id":1,"payload":{"project_id":42,"keywords":"x"}}`), col, de, ""},
		{pc, "pc-missing", []byte(`{"event_id":"e","payload":{"keywords":["a"]}}`), col, de, ""},
		{pc, "pc-timestamp", []byte(`{"event_id":"e","timestamp":"yesterday","payload":{"project_id":"p"}}`), col, de, ""},
		{dc, "dc-tombstone", nil, ana, de, ""},
		{dc, "dc-empty", []byte{}, ana, de, ""},
		{dc, "dc-json", []byte(`not json`), ana, de, ""},
		{dc, "dc-types", []byte(`{"payload":{"project_id":["p"],"item_id":"i","object_key":"k"}}`), ana, de, ""},
		{dc, "dc-missing", []byte(`{"payload":{"project_id":"p-good","item_id":"i"}}`), ana, de, ""},
		{af, "af-tombstone", nil, prg, de, ""},
		{af, "af-empty", []byte{}, prg, de, ""},
		{af, "af-json", []byte(`{{`), prg, de, ""},
		{af, "af-types", []byte(`{"payload":{"project_id":"p-good","item_id":7}}`), prg, de, ""},
		{af, "af-missing", []byte(`{"payload":{"item_id":"x"}}`), prg, de, ""},
		// Valid events of projects the collector never saw: dead-lettered at
		// once, not retried for minutes as if Redis had lost their state.
		{af, "af-unknown-project", finishedJSON(t, "p-nowhere", "af-unknown-project"), ProgressName, stages.ReasonSanityFail, RuleUnknownProject},
		// A project completed long ago whose state expired (a replay): dropped.
		{af, "af-expired-project", finishedJSON(t, "p-expired", "af-expired-project"), "", "", ""},
	}
	if err := updateMeta(testkit.Context(t), h.objects, "p-expired", func(m *projectMeta) {
		m.Total, m.SealedAt, m.CompletedAt = 1, time.Now().Add(-8*24*time.Hour), time.Now().Add(-8*24*time.Hour)
	}); err != nil {
		t.Fatal(err)
	}
	h.produceBad(bad)
	h.start(h.cfg)
	h.createProject(ProjectCreated{ProjectID: "p-good", Keywords: []string{"VF3"}, Targets: []Target{synthetic("tiktok", 5)}})
	st := h.waitDone("p-good", 60*time.Second)
	if st.Total != 5 || st.Done != 5 || st.Errors != 0 {
		t.Fatalf("final state %+v, want total=done=5 errors=0", st)
	}
	if cs := h.completions("p-good"); len(cs) != 1 {
		t.Fatalf("%d completions, want 1", len(cs))
	}
	h.checkDLQ(bad)
	testkit.WaitFor(t, 10*time.Second, "progress counter caught up", func() bool { return h.caughtUp(h.cfg.ProgressGroup, af) })
	if st := h.state("p-expired"); st.Status != progress.StatusNotFound {
		t.Errorf("expired project got state %+v", st)
	}
	if cs := h.completions("p-expired"); len(cs) != 0 {
		t.Errorf("expired project completed again: %+v", cs)
	}
}

// Engagement counts near the int64 limit, negative counts and an analyser
// that returns NaN: the project still completes, every item is counted
// (the NaN one as a failed item with rule smap.analyzer.nan), and no score
// in post_analytics or analysis.finished is NaN or infinite.
func testAbsurdCounts(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	const project = "p-absurd"
	items := []Item{
		{SourceID: "max", Text: "I love the VF3, amazing", Likes: math.MaxInt64, Comments: math.MaxInt64, Shares: math.MaxInt64, Views: math.MaxInt64},
		{SourceID: "overflow", Text: "the VF3 is terrible", Likes: math.MaxInt64, Comments: 1},
		{SourceID: "negative", Text: "specs of the VF3", Likes: -5, Comments: math.MinInt64, Shares: -1, Views: -100},
		{SourceID: "nan", Text: "VF3 VF3"},
		{SourceID: "plain", Text: "the VF3 is good", Likes: 10, Comments: 5, Shares: 2, Views: 260},
	}
	h.cfg.Crawler = SchemeCrawler{Synthetic: fixedCrawler(items...)}
	h.cfg.Analyzers = append(Builtins(), nanAnalyzer{sourceID: "nan"})
	h.start(h.cfg)
	h.createProject(ProjectCreated{ProjectID: project, Keywords: []string{"VF3"}, Targets: []Target{{Platform: "tiktok"}}})
	st := h.waitDone(project, 30*time.Second)
	if st.Total != 5 || st.Done != 5 || st.Errors != 1 {
		t.Fatalf("final state %+v, want total=done=5 errors=1", st)
	}
	var bad int
	err := h.pg.Pool.QueryRow(testkit.Context(t), `SELECT count(*) FROM post_analytics WHERE project_id = $1 AND error_type IS NULL
		AND (engagement_score IS NULL OR engagement_score IN ('NaN', 'Infinity', '-Infinity') OR engagement_score < 0
		  OR sentiment_score IS NULL OR sentiment_score IN ('NaN', 'Infinity', '-Infinity'))`, project).Scan(&bad)
	if err != nil {
		t.Fatal(err)
	}
	if rows, failed := h.rows(project); rows != 5 || failed != 1 || bad != 0 {
		t.Fatalf("post_analytics: %d rows, %d failed, %d with a non-finite or negative score; want 5, 1, 0", rows, failed, bad)
	}
	dlq := h.k.ReadTopic(t, h.cfg.AnalyticsErrorsTopic)
	nanID := ItemID(project, "tiktok", "nan")
	if len(dlq) != 1 || string(dlq[0].Key) != nanID {
		t.Fatalf("%d DLQ records, want the NaN item %s only", len(dlq), nanID)
	}
	if hs := testkit.Headers(dlq[0]); hs[stages.HeaderReason] != string(stages.ReasonException) || hs[stages.HeaderRule] != RuleAnalyzer+"nan" {
		t.Errorf("NaN item DLQ headers %v", hs)
	}
	for _, r := range h.k.ReadTopic(t, h.cfg.AnalysisFinishedTopic, testkit.ReadCommitted()) {
		e, err := DecodeAnalysisFinished(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if p := e.Payload; math.IsNaN(p.EngagementScore) || math.IsInf(p.EngagementScore, 0) || p.EngagementScore < 0 {
			t.Errorf("analysis.finished of %s: engagement %v", p.ItemID, p.EngagementScore)
		}
	}
}

// NUL characters (which PostgreSQL refuses in text and jsonb) in keywords
// and item text do not stop the analytics partition; a project id that no
// downstream store accepts (NUL, control characters, too long, or ending in
// ":items" or ":found", whose progress hash would be another project's
// set) is dead-lettered by the collector with rule smap.project_id, and
// nothing of it is crawled.
func testNULAndLongIDs(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{collectedPartitions: 1, finishedPartitions: 1})
	h.cfg.Crawler = SchemeCrawler{Synthetic: fixedCrawler(
		Item{SourceID: "nul-text", Text: "the VF\x003 is good \x00 really", Author: "a\x00b"},
		Item{SourceID: "plain", Text: "I love the VF3"},
	)}
	h.start(h.cfg)
	pc, col := h.cfg.ProjectCreatedTopic, CollectorName
	var bad []badRecord
	for _, id := range []string{"p\x00nul", "p\nnewline", strings.Repeat("p", 300), "p-after:items", "p-nul-keyword:found"} {
		b := must(t)(NewProjectCreated(ProjectCreated{ProjectID: id, Keywords: []string{"VF3"}, Targets: []Target{{Platform: "tiktok"}}}, time.Now()))
		bad = append(bad, badRecord{pc, id, b, col, stages.ReasonSanityFail, RuleProjectID})
	}
	h.produceBad(bad)
	h.createProject(ProjectCreated{ProjectID: "p-nul-keyword", Keywords: []string{"VF\x003", "VF3", "\x00"}, Targets: []Target{{Platform: "tiktok"}}})
	h.createProject(ProjectCreated{ProjectID: "p-after", Keywords: []string{"VF3"}, Targets: []Target{{Platform: "tiktok"}}})
	for _, p := range []string{"p-nul-keyword", "p-after"} {
		st := h.waitDone(p, 30*time.Second)
		if st.Total != 2 || st.Done != 2 || st.Errors != 0 {
			t.Errorf("%s: final state %+v, want total=done=2 errors=0", p, st)
		}
		if rows, failed := h.rows(p); rows != 2 || failed != 0 {
			t.Errorf("%s: post_analytics %d rows, %d failed; want 2, 0", p, rows, failed)
		}
	}
	h.checkDLQ(bad)
	for _, b := range bad {
		if progress.CheckJobID(b.key) != nil {
			continue // no state can exist under such an id (Get refuses it)
		}
		if st := h.state(b.key); st.Total != 0 || st.Done != 0 {
			t.Errorf("%.20q: rejected project has progress %+v", b.key, st)
		}
	}
}

func finishedJSON(t *testing.T, project, item string) []byte {
	t.Helper()
	b, err := json.Marshal(Event[AnalysisFinished]{EventID: finishedEventID(item), Timestamp: time.Now(),
		Payload: AnalysisFinished{ProjectID: project, ItemID: item, Status: AnalysisOK, AnalyzedAt: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// must returns a function that encodes a project.created event.
func must(t *testing.T) func(Event[ProjectCreated]) []byte {
	return func(e Event[ProjectCreated]) []byte {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}
