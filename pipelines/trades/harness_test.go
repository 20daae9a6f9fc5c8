package trades

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
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
	"github.com/sluicehq/sluice/stages/run"
	"github.com/sluicehq/sluice/topics"
)

// testClock is a settable clock shared by a test and the services.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// svcHarness is one isolated deployment of trades-score and trades-digest:
// its own topic and group prefix, PostgreSQL schema and object prefix.
type svcHarness struct {
	t       *testing.T
	k       *testkit.Kafka
	pg      *testkit.Postgres
	store   *testkit.ObjectStore
	objects objstore.Store
	naming  pipelines.Naming
	clock   *testClock
	cl      *kgo.Client
	cfg     Config
}

func newSvcHarness(t *testing.T, opts ...testkit.Option) *svcHarness {
	t.Helper()
	return newSvcHarnessParts(t, 1, opts...)
}

// newSvcHarnessParts is newSvcHarness with biasParts partitions of
// trades.bias and trades.digest.state (settle needs one).
func newSvcHarnessParts(t *testing.T, biasParts int32, opts ...testkit.Option) *svcHarness {
	t.Helper()
	k := testkit.NewKafka(t, opts...)
	pg := testkit.NewPostgres(t)
	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	obj := testkit.NewObjectStore(t, testkit.FakeOK())
	prefix := testkit.Name(t, "tr") + "."
	h := &svcHarness{t: t, k: k, pg: pg, store: obj, objects: obj.Store(t),
		naming: pipelines.Naming{TopicPrefix: prefix, GroupPrefix: prefix}, clock: &testClock{}}
	adm := k.Admin(t)
	compact := "compact"
	for _, name := range Declare(Config{}).Topics() {
		cfgs := map[string]*string{}
		if name == topics.TradesDigestState {
			cfgs["cleanup.policy"] = &compact
		}
		full := h.naming.Topic(name)
		// One partition of trades.bias (and its store) unless asked: the
		// timer's firing count is then that partition's (see settle).
		parts := int32(3)
		if name == topics.TradesBias || name == topics.TradesDigestState {
			parts = biasParts
		}
		if _, err := adm.CreateTopic(ctx, parts, -1, cfgs, full); err != nil {
			t.Fatalf("create %s: %v", full, err)
		}
		if k.Real {
			t.Cleanup(func() { _, _ = adm.DeleteTopic(context.Background(), full) })
		}
	}
	// A real cluster's metadata may lag the creation.
	var created []string
	for _, name := range Declare(Config{}).Topics() {
		created = append(created, h.naming.Topic(name))
	}
	testkit.WaitFor(t, 30*time.Second, "topics in the metadata", func() bool {
		td, err := adm.ListTopics(ctx, created...)
		if err != nil || len(td) != len(created) {
			return false
		}
		for _, d := range td {
			if d.Err != nil || len(d.Partitions) == 0 {
				return false
			}
		}
		return true
	})
	h.cl = k.Client(t)
	h.cfg = fastConfig(h.clock.Now)
	t.Logf("services: %s, %s, object store %s", k, pg, obj.Kind)
	return h
}

// fastConfig is the services' config of the tests: short batches, commit
// interval, timer tick and state flush, the clock now.
func fastConfig(now func() time.Time) Config {
	fast := run.Config{
		BatchLinger: 5 * time.Millisecond, CommitInterval: 100 * time.Millisecond, RevokeTimeout: 2 * time.Second,
		SinkRetry: run.RetryPolicy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
	}
	cfg := Config{
		Score: ScoreConfig{Runtime: fast, Now: now},
		Digest: DigestConfig{Runtime: fast, Now: now, Tick: 20 * time.Millisecond, StateFlush: 100 * time.Millisecond,
			Grace: time.Hour, Settle: 30 * time.Second, Horizon: 8 * 7 * 24 * time.Hour},
	}
	cfg.Score.Runtime.Retry = run.RetryPolicy{MaxAttempts: 3, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	return cfg
}

func (h *svcHarness) topic(name string) string { return h.naming.Topic(name) }

// deployment is one running "process" of the services.
type deployment struct {
	reg  *prometheus.Registry
	ops  *opshttp.Server
	stop func()
}

// start builds the trades pipeline from its declaration and runs it.
func (h *svcHarness) start(cfg Config) *deployment {
	h.t.Helper()
	reg := prometheus.NewRegistry()
	env := pipelines.Env{Kafka: h.k.Opts(h.t), DB: h.pg.Pool, Objects: h.objects, Registerer: reg, Ops: opshttp.New(reg, nil),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	set, err := pipelines.Build(env, h.naming, []pipelines.Spec{Declare(cfg)})
	if err != nil {
		h.t.Fatalf("build: %v", err)
	}
	stops := make([]func() error, len(set.Services))
	for i, s := range set.Services {
		stops[i] = testkit.RunInBackground(h.t, s.Name(), s.Run)
	}
	d := &deployment{reg: reg, ops: env.Ops}
	d.stop = sync.OnceFunc(func() {
		for _, s := range stops {
			if err := s(); err != nil {
				h.t.Errorf("stop: %v", err)
			}
		}
		set.Close()
	})
	h.t.Cleanup(d.stop)
	testkit.WaitFor(h.t, 30*time.Second, "services ready", func() bool {
		for _, s := range set.Services {
			if !s.Ready() {
				return false
			}
		}
		return true
	})
	return d
}

// firings returns the periodic timer firings of trades-digest so far.
func (d *deployment) firings(t *testing.T) float64 {
	return testkit.Metric(t, d.reg, "sluice_timer_firings_total", "pipeline", DigestName, "timer", "periodic")
}

// settle waits until trades-digest processed done records in all (since
// this deployment started) and the timer of its one partition then fired
// twice more: a firing is counted before its outputs are written, and the
// next one starts after that write, so the outputs of at least one whole
// firing that saw the clock and those records are durable.
func (d *deployment) settle(t *testing.T, done int) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, "records processed", func() bool {
		return testkit.Metric(t, d.reg, "sluice_records_done_total", "pipeline", DigestName) >= float64(done)
	})
	from := d.firings(t)
	testkit.WaitFor(t, 20*time.Second, "two timer firings", func() bool { return d.firings(t) >= from+2 })
}

// produce sends v (JSON-encoded) keyed by key to topic and waits for the ack.
func (h *svcHarness) produce(topic, key string, v any) {
	h.t.Helper()
	b, ok := v.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := h.cl.ProduceSync(testkit.Context(h.t), &kgo.Record{Topic: topic, Key: []byte(key), Value: b}).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

// events returns the envelopes on topic (catalog name) with their ids.
func (h *svcHarness) events(topic string) []Event[json.RawMessage] {
	h.t.Helper()
	var out []Event[json.RawMessage]
	for _, r := range h.k.ReadTopic(h.t, h.topic(topic)) {
		var e Event[json.RawMessage]
		if err := json.Unmarshal(r.Value, &e); err != nil {
			h.t.Fatalf("%s: %v: %s", topic, err, r.Value)
		}
		out = append(out, e)
	}
	return out
}

// waitEvents waits until topic holds at least n events and returns them.
func (h *svcHarness) waitEvents(topic string, n int) []Event[json.RawMessage] {
	h.t.Helper()
	return h.waitEventsFor(topic, n, 30*time.Second)
}

// waitEventsFor is waitEvents with a timeout of its own.
func (h *svcHarness) waitEventsFor(topic string, n int, timeout time.Duration) []Event[json.RawMessage] {
	h.t.Helper()
	var evs []Event[json.RawMessage]
	testkit.WaitFor(h.t, timeout, topic+" events", func() bool {
		evs = h.events(topic)
		return len(evs) >= n
	})
	return evs
}

// dlq returns the (rule, reason) of every dead letter.
func (h *svcHarness) dlq() [][2]string {
	h.t.Helper()
	var out [][2]string
	for _, r := range h.k.ReadTopic(h.t, h.topic(topics.TradesDLQ)) {
		hs := testkit.Headers(r)
		out = append(out, [2]string{hs["dlq.reason"], hs["dlq.rule"]})
	}
	return out
}

// insertTrades stores trades as trades-import would.
func (h *svcHarness) insertTrades(ts ...Trade) {
	h.t.Helper()
	ctx := testkit.Context(h.t)
	for _, tr := range ts {
		if _, err := h.pg.Pool.Exec(ctx, `INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, fee, ts)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (user_id, broker, ext_id) DO UPDATE SET qty = EXCLUDED.qty, price = EXCLUDED.price, fee = EXCLUDED.fee, ts = EXCLUDED.ts`,
			tr.ID, tr.UserID, tr.Broker, tr.ExtID, tr.Symbol, string(tr.Side), exactString(tr.Qty), exactString(tr.Price),
			exactString(tr.Fee), tr.TS); err != nil {
			h.t.Fatalf("insert trade %s: %v", tr.ExtID, err)
		}
	}
}

// adm returns an admin client on the cluster.
func (h *svcHarness) adm() *kadm.Client { return h.k.Admin(h.t) }
