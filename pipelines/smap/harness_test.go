package smap

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages/progress"
	"github.com/sluicehq/sluice/stages/run"
)

// harness is one isolated smap deployment for a test: its own topics,
// groups, Redis key prefix, PostgreSQL schema and object prefix.
type harness struct {
	t       *testing.T
	k       *testkit.Kafka
	redis   *testkit.Redis
	pg      *testkit.Postgres
	objects objstore.Store
	cfg     Config
	cl      *kgo.Client
	adm     *kadm.Client
	tr      *progress.Tracker
}

type harnessOpts struct {
	collectedPartitions int32
	finishedPartitions  int32
	fakeKafka           bool // always kfake (fault injection), even with KAFKA_BROKERS set
}

func newHarness(t *testing.T, pgs *testkit.PostgresServer, o harnessOpts) *harness {
	t.Helper()
	if o.collectedPartitions == 0 {
		o.collectedPartitions = 2
	}
	if o.finishedPartitions == 0 {
		o.finishedPartitions = 2
	}
	kopt := testkit.FakeOK()
	if o.fakeKafka {
		kopt = testkit.ForceFake()
	}
	k := testkit.NewKafka(t, kopt)
	r := testkit.NewRedis(t, testkit.WithRedisDB(1), testkit.FakeOK())
	pg := pgs.Postgres(t)
	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	h := &harness{t: t, k: k, redis: r, pg: pg, objects: testkit.NewObjectStore(t, testkit.FakeOK()).Store(t)}
	h.cfg = Config{
		ProjectCreatedTopic:   k.Topic(t, "pc", 1),
		DataCollectedTopic:    k.Topic(t, "dc", o.collectedPartitions),
		AnalysisFinishedTopic: k.Topic(t, "af", o.finishedPartitions),
		JobCompletedTopic:     k.Topic(t, "jc", 1),
		AnalyticsErrorsTopic:  k.Topic(t, "err", 1),
		CollectorGroup:        testkit.Name(t, "col"),
		AnalyticsGroup:        testkit.Name(t, "ana"),
		ProgressGroup:         testkit.Name(t, "prg"),
		KeyPrefix:             r.Prefix + "smap:proj:",
		MissingStateWait:      50 * time.Millisecond,
		Crawler:               SchemeCrawler{Synthetic: &SyntheticCrawler{}},
		Runtime: run.Config{
			BatchMaxRecords: 50,
			BatchLinger:     10 * time.Millisecond,
			CommitInterval:  100 * time.Millisecond,
			RevokeTimeout:   2 * time.Second,
			Retry:           run.RetryPolicy{MaxAttempts: 5, Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
			SinkRetry:       run.RetryPolicy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		},
	}
	h.cl = k.Client(t)
	h.adm = kadm.NewClient(h.cl)
	tr, err := NewTracker(r.Client, h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.tr = tr
	t.Logf("services: %s, %s, %s, object store %T", k, r, pg, h.objects)
	return h
}

func (h *harness) env(reg *prometheus.Registry) pipelines.Env {
	return pipelines.Env{
		Kafka:      h.k.Opts(h.t),
		DB:         h.pg.Pool,
		Redis:      h.redis.Client,
		Objects:    h.objects,
		Registerer: reg,
		Ops:        opshttp.New(reg, nil),
	}
}

// deployment is one running "process" of the smap services.
type deployment struct {
	env  pipelines.Env
	reg  *prometheus.Registry
	svcs []pipelines.Service
	stop func()
}

// start builds and runs every smap service with cfg, like one process.
func (h *harness) start(cfg Config) *deployment {
	h.t.Helper()
	reg := prometheus.NewRegistry()
	env := h.env(reg)
	svcs, err := Services(env, cfg)
	if err != nil {
		h.t.Fatalf("services: %v", err)
	}
	stops := make([]func() error, len(svcs))
	for i, s := range svcs {
		stops[i] = testkit.RunInBackground(h.t, "service "+s.Name(), s.Run)
	}
	var once sync.Once
	d := &deployment{env: env, reg: reg, svcs: svcs}
	// stop cancels every service at once, like one process shutting down.
	d.stop = func() {
		once.Do(func() {
			var wg sync.WaitGroup
			for i, stop := range stops {
				wg.Go(func() {
					if err := stop(); err != nil {
						h.t.Errorf("service %s: %v", svcs[i].Name(), err)
					}
				})
			}
			wg.Wait()
		})
	}
	h.t.Cleanup(d.stop)
	return d
}

func (d *deployment) ready() bool {
	for _, s := range d.svcs {
		if !s.Ready() {
			return false
		}
	}
	return true
}

// createProject produces a project.created event.
func (h *harness) createProject(p ProjectCreated) {
	h.t.Helper()
	b, err := json.Marshal(NewProjectCreated(p, time.Now()))
	if err != nil {
		h.t.Fatal(err)
	}
	ctx := testkit.Context(h.t)
	if err := h.cl.ProduceSync(ctx, &kgo.Record{Topic: h.cfg.ProjectCreatedTopic, Key: []byte(p.ProjectID), Value: b}).FirstErr(); err != nil {
		h.t.Fatalf("produce project.created: %v", err)
	}
}

func synthetic(platform string, n int) Target {
	return Target{Platform: platform, URL: fmt.Sprintf("synthetic://%s?items=%d", platform, n)}
}

func (h *harness) state(id string) progress.State {
	h.t.Helper()
	st, err := h.tr.Get(testkit.Context(h.t), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

func (h *harness) waitDone(id string, timeout time.Duration) progress.State {
	h.t.Helper()
	var st progress.State
	testkit.WaitFor(h.t, timeout, "project "+id+" DONE", func() bool {
		st = h.state(id)
		return st.Status == progress.StatusDone
	})
	return st
}

// events returns how many records of topic a read_committed reader sees
// (the analytics runtime produces analysis.finished in transactions: the
// end offsets count their markers and aborted records too).
func (h *harness) events(topic string) int64 {
	return int64(len(h.k.ReadTopic(h.t, topic, testkit.ReadCommitted())))
}

// count returns the sum of topic's end offsets (transaction markers
// included).
func (h *harness) count(topic string) int64 {
	n := int64(0)
	for _, e := range testkit.EndOffsets(h.t, h.adm, topic) {
		n += e
	}
	return n
}

// caughtUp reports whether group committed every record of topic.
func (h *harness) caughtUp(group, topic string) bool {
	h.t.Helper()
	resp, err := h.adm.FetchOffsets(testkit.Context(h.t), group)
	if err != nil {
		return false
	}
	ends := testkit.EndOffsets(h.t, h.adm, topic)
	for p, e := range ends {
		o, ok := resp.Lookup(topic, p)
		if e == 0 {
			continue
		}
		if !ok || o.Err != nil || o.At < e {
			return false
		}
	}
	return true
}

func (h *harness) rows(project string) (total, failed int) {
	h.t.Helper()
	err := h.pg.Pool.QueryRow(testkit.Context(h.t),
		`SELECT count(*), count(*) FILTER (WHERE error_type IS NOT NULL) FROM post_analytics WHERE project_id = $1`, project).Scan(&total, &failed)
	if err != nil {
		h.t.Fatal(err)
	}
	return total, failed
}

// completions returns the job.completed payloads of project.
func (h *harness) completions(project string) []JobCompleted {
	h.t.Helper()
	var out []JobCompleted
	for _, r := range h.k.ReadTopic(h.t, h.cfg.JobCompletedTopic) {
		e, err := DecodeJobCompleted(r.Value)
		if err != nil {
			h.t.Fatalf("job.completed: %v", err)
		}
		if string(r.Key) != e.Payload.ProjectID || e.EventID != completedEventID(e.Payload.ProjectID) {
			h.t.Errorf("job.completed key %q / event id %q do not match project %q", r.Key, e.EventID, e.Payload.ProjectID)
		}
		if e.Payload.ProjectID == project {
			out = append(out, e.Payload)
		}
	}
	return out
}

// requireOncePerItem fails the test unless a read_committed reader of topic
// sees exactly one record per item (item decodes a value's item id) for n
// items, every one of them transactional, while read_uncommitted sees
// more: the copies of aborted transactions.
func (h *harness) requireOncePerItem(topic string, n int, item func([]byte) (string, error)) {
	t := h.t
	t.Helper()
	per := map[string]int{}
	for _, r := range h.k.ReadTopic(t, topic, testkit.ReadCommitted()) {
		if !r.Attrs.IsTransactional() {
			t.Fatalf("%s record %s produced outside a transaction", topic, r.Key)
		}
		id, err := item(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		per[id]++
	}
	for id, c := range per {
		if c != 1 {
			t.Errorf("%d records of %s visible to read_committed in %s, want 1", c, id, topic)
		}
	}
	if len(per) != n {
		t.Errorf("%s: records of %d items, want %d", topic, len(per), n)
	}
	if all := len(h.k.ReadTopic(t, topic)); all <= n {
		t.Errorf("read_uncommitted sees %d records in %s, want the aborted copies beyond the %d committed", all, topic, n)
	}
}
