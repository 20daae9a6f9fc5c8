package smap

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// Permanent object-store errors are not retried: an invalid key from a
// record is dead-lettered at once, a configuration error stops the runner.
func TestObjectStoreErrors(t *testing.T) {
	pgs := testkit.NewPostgresServer(t)
	t.Run("InvalidKeyDeadLetteredAtOnce", func(t *testing.T) { t.Parallel(); testInvalidKey(t, pgs) })
	t.Run("ConfigErrorIsFatal", func(t *testing.T) { t.Parallel(); testStoreConfigFatal(t, pgs) })
}

// getFaultStore fails Get for chosen keys (or every key when all is set)
// with err and counts the Get calls per key.
type getFaultStore struct {
	objstore.Store
	fail map[string]bool
	all  bool
	err  error
	mu   sync.Mutex
	gets map[string]int
}

func (s *getFaultStore) Get(ctx context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	s.gets[key]++
	s.mu.Unlock()
	if s.all || s.fail[key] {
		return nil, fmt.Errorf("objstore: get %s: %w", key, s.err)
	}
	return s.Store.Get(ctx, key)
}

func (s *getFaultStore) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[key]
}

func testInvalidKey(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	const project, n = "p-badkey", 10
	fs := &getFaultStore{Store: h.objects, fail: map[string]bool{}, gets: map[string]int{}, err: objstore.ErrInvalidKey}
	want := map[string]string{} // item id → object key
	for _, i := range []int{3, 7} {
		id := ItemID(project, "tiktok", "tiktok-"+pad(i))
		fs.fail[ObjectKey("tiktok", id)] = true
		want[id] = ObjectKey("tiktok", id)
	}
	h.objects = fs
	cfg := h.cfg
	cfg.Runtime.Retry = run.RetryPolicy{MaxAttempts: 3, Initial: 10 * time.Millisecond} // a retry (there must be none) is quick
	d := h.start(cfg)
	h.createProject(ProjectCreated{ProjectID: project, Targets: []Target{synthetic("tiktok", n)}})
	st := h.waitDone(project, 60*time.Second)
	if st.Done != n || st.Total != n || st.Errors != int64(len(want)) {
		t.Fatalf("final state %+v, want done=total=%d errors=%d", st, n, len(want))
	}
	dlq := h.waitDLQ(len(want))
	if len(dlq) != len(want) {
		t.Fatalf("%d DLQ records, want %d", len(dlq), len(want))
	}
	for id, key := range want {
		r, ok := dlq[id]
		if !ok {
			t.Fatalf("no DLQ record for %s", id)
		}
		hs := testkit.Headers(r)
		if hs[stages.HeaderReason] != string(stages.ReasonSanityFail) || hs[stages.HeaderRule] != RuleObjectKey ||
			hs[stages.HeaderAttempts] != "1" || !strings.Contains(hs[stages.HeaderError], "invalid object key") {
			t.Errorf("DLQ headers of %s: %v; want sanity_fail, rule %s, 1 attempt", id, hs, RuleObjectKey)
		}
		if c := fs.count(key); c != 1 {
			t.Errorf("%d reads of %s, want 1 (no retry)", c, key)
		}
	}
	if v := testkit.Metric(t, d.reg, "smap_items_analysed_total", "result", string(stages.ReasonRetriesExhausted)); v != 0 {
		t.Errorf("%v items retries_exhausted, want 0", v)
	}
}

func testStoreConfigFatal(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{collectedPartitions: 1})
	fs := &getFaultStore{Store: h.objects, all: true, gets: map[string]int{},
		err: minio.ErrorResponse{StatusCode: 403, Code: "AccessDenied", Message: "Access Denied.", BucketName: "bkt-denied"}}
	h.objects = fs
	cfg := h.cfg
	cfg.Runtime.Retry = run.RetryPolicy{MaxAttempts: 3, Initial: 10 * time.Millisecond} // a retry (there must be none) is quick
	env := h.env(prometheus.NewRegistry())
	svcs, res, err := pipelines.Construct(func(r *pipelines.Resources) ([]pipelines.Service, error) {
		return services(env, cfg, r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close() // the other services are not run here
	var ana pipelines.Service
	for _, s := range svcs {
		if s.Name() == AnalyticsName {
			ana = s
		}
	}
	if ana == nil {
		t.Fatal("no analytics service")
	}
	const item = "tiktok-denied"
	key := ObjectKey("tiktok", item)
	v, err := json.Marshal(Event[DataCollected]{EventID: "dc-" + item, Timestamp: time.Now().UTC(),
		Payload: DataCollected{ProjectID: "p-denied", ItemID: item, Platform: "tiktok", ObjectKey: key}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cl.ProduceSync(testkit.Context(t), &kgo.Record{Topic: cfg.DataCollectedTopic, Key: []byte(item), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testkit.Context(t), 60*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- ana.Run(ctx) }()
	select {
	case err = <-errc:
	case <-time.After(45 * time.Second):
		cancel()
		<-errc
		t.Fatal("analytics kept running after AccessDenied")
	}
	if err == nil || stages.Classify(err).Kind != stages.KindFatal {
		t.Fatalf("Run = %v, want a fatal error", err)
	}
	for _, s := range []string{"AccessDenied", "bkt-denied"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Run error %q does not name %s", err, s)
		}
	}
	if c := fs.count(key); c != 1 {
		t.Errorf("%d reads of %s, want 1 (no retry)", c, key)
	}
	if n := h.count(cfg.AnalyticsErrorsTopic); n != 0 {
		t.Errorf("%d DLQ records, want none", n)
	}
	if n := h.count(cfg.AnalysisFinishedTopic); n != 0 {
		t.Errorf("%d analysis.finished records, want none", n)
	}
	if h.caughtUp(cfg.AnalyticsGroup, cfg.DataCollectedTopic) {
		t.Error("the record was committed")
	}
}
