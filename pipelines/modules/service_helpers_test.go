package modules

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/stages/ratelimit"
	"github.com/sluicehq/sluice/stages/run"
)

// countingSource counts the upstream calls per key and delegates to inner;
// hook, when set, runs before inner with the key's call number and may
// answer instead (ok).
type countingSource struct {
	inner ModuleSource
	hook  func(ctx context.Context, key string, call int) (Snapshot, error, bool)
	mu    sync.Mutex
	calls map[string]int
	total atomic.Int64
}

func newCountingSource(inner ModuleSource) *countingSource {
	return &countingSource{inner: inner, calls: map[string]int{}}
}

func (c *countingSource) Fetch(ctx context.Context, ticker, module string) (Snapshot, error) {
	key := Key(ticker, module)
	c.mu.Lock()
	c.calls[key]++
	n := c.calls[key]
	c.mu.Unlock()
	c.total.Add(1)
	if c.hook != nil {
		if s, err, ok := c.hook(ctx, key, n); ok {
			return s, err
		}
	}
	return c.inner.Fetch(ctx, ticker, module)
}

func (c *countingSource) Calls(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[key]
}

// svcFixture runs the modules services against Kafka (KAFKA_BROKERS or
// kfake), PostgreSQL (a migrated schema of its own) and Redis (REDIS_URL or
// miniredis), on topics and groups of its own.
type svcFixture struct {
	k       *testkit.Kafka
	ctx     context.Context
	pool    *pgxpool.Pool
	pgURL   string // may hold a password: never log it
	redis   *testkit.Redis
	reg     *prometheus.Registry
	src     *countingSource
	cfg     Config
	env     pipelines.Env
	members atomic.Int32
}

func newSvcFixture(t *testing.T, opts []testkit.Option, mod func(*Config)) *svcFixture {
	t.Helper()
	f := &svcFixture{reg: prometheus.NewRegistry()}
	f.k = testkit.NewKafka(t, opts...)
	pg := testkit.NewPostgres(t)
	f.ctx, f.pool, f.pgURL = testkit.Context(t), pg.Pool, pg.URL
	if _, err := schemas.Migrate(f.ctx, pg.URL); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	redis := testkit.NewRedis(t, testkit.FakeOK())
	f.redis = redis
	f.src = newCountingSource(NewSynthetic(SyntheticConfig{}))
	compact := map[string]*string{"cleanup.policy": ptr("compact")}
	f.cfg = Config{
		RefreshTopic: f.k.Topic(t, "modules.refresh", 3),
		StateTopic:   f.k.Topic(t, "modules.state", 3, compact),
		DLQTopic:     f.k.Topic(t, "modules.dlq", 1),
		RefreshGroup: testkit.Name(t, "refresh"),
		MirrorGroup:  testkit.Name(t, "mirror"),
		Source:       f.src,
		RateLimit: RateLimitConfig{
			Windows:   []ratelimit.Window{{Size: time.Second, Limit: 1000}},
			KeyPrefix: redis.Prefix,
			Backoff:   ratelimit.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond},
		},
		Retry:   run.RetryPolicy{MaxAttempts: 3, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Runtime: run.Config{BatchLinger: 5 * time.Millisecond, CommitInterval: 100 * time.Millisecond, RevokeTimeout: 2 * time.Second},
	}
	if mod != nil {
		mod(&f.cfg)
	}
	f.env = pipelines.Env{
		Kafka:      append(f.k.Opts(t), kgo.FetchMaxWait(100*time.Millisecond)),
		DB:         f.pool,
		Redis:      redis.Client,
		Registerer: f.reg,
		Logger:     slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	return f
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func ptr[T any](v T) *T { return &v }

// member is one running member of both groups.
type member struct {
	id   string
	stop func()
}

// start runs a member of both groups and waits until both are ready.
func (f *svcFixture) start(t *testing.T) member {
	t.Helper()
	n := f.members.Add(1)
	cfg := f.cfg
	cfg.MemberID = fmt.Sprintf("member-%d", n)
	env := f.env
	env.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"member": strconv.Itoa(int(n))}, f.reg)
	svcs, err := Services(env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var stops []func() error
	for _, s := range svcs {
		stops = append(stops, testkit.RunInBackground(t, s.Name(), s.Run))
	}
	for _, s := range svcs {
		testkit.WaitFor(t, 30*time.Second, s.Name()+" ready", s.Ready)
	}
	return member{id: cfg.MemberID, stop: func() {
		for _, stop := range stops {
			if err := stop(); err != nil {
				t.Errorf("%s: Run: %v", cfg.MemberID, err)
			}
		}
	}}
}

// request is a modules.refresh value.
func request(ticker, module string) []byte {
	b, _ := json.Marshal(map[string]any{"ticker": ticker, "module": module, "force": false, "reason": "test",
		"requested_at": time.Now().UTC(), "request_id": fmt.Sprint(time.Now().UnixNano())})
	return b
}

// produce writes records to the refresh topic (key-hash partitioned) and
// waits for their acknowledgement.
func (f *svcFixture) produce(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	cl := f.k.Client(t)
	for _, r := range recs {
		if r.Topic == "" {
			r.Topic = f.cfg.RefreshTopic
		}
	}
	if err := cl.ProduceSync(f.ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func (f *svcFixture) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return testkit.Metric(t, f.reg, "sluice_modules_"+name, labels...)
}

// waitRequests waits until n requests were handled (any outcome).
func (f *svcFixture) waitRequests(t *testing.T, n float64) {
	t.Helper()
	testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("%v requests handled", n), func() bool {
		return f.metric(t, "requests_total") >= n
	})
}

// states reads the state topic and folds it per key keeping the greatest
// token.
func (f *svcFixture) states(t *testing.T) map[string]State {
	t.Helper()
	out := map[string]State{}
	for _, r := range f.k.ReadTopic(t, f.cfg.StateTopic) {
		if r.Value == nil {
			continue
		}
		s, err := DecodeState(r.Key, r.Value)
		if err != nil {
			t.Fatalf("state record %s: %v", r.Key, err)
		}
		if cur, ok := out[s.Key()]; !ok || !s.Token().Less(cur.Token()) {
			out[s.Key()] = s
		}
	}
	return out
}

// row is a ticker_data_modules row.
type row struct {
	status, lockOwner, lastError string
	epoch, version               int64
}

// row reads the mirror's row of ticker × module; ok is false when absent.
func (f *svcFixture) row(t *testing.T, ticker, module string) (row, bool) {
	t.Helper()
	var r row
	err := f.pool.QueryRow(f.ctx, `SELECT status, coalesce(refresh_lock_owner, ''), coalesce(last_error, ''), state_epoch, state_version
		FROM ticker_data_modules WHERE ticker = $1 AND module_id = $2`, ticker, module).
		Scan(&r.status, &r.lockOwner, &r.lastError, &r.epoch, &r.version)
	if err != nil {
		return row{}, false
	}
	return r, true
}

// waitRow waits until the row of ticker × module satisfies cond.
func (f *svcFixture) waitRow(t *testing.T, ticker, module, what string, cond func(row) bool) row {
	t.Helper()
	var r row
	testkit.WaitFor(t, 60*time.Second, what, func() bool {
		var ok bool
		r, ok = f.row(t, ticker, module)
		return ok && cond(r)
	})
	return r
}

func (f *svcFixture) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(f.ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// dlq returns the dead letters, keyed by their original key.
func (f *svcFixture) dlq(t *testing.T) []*kgo.Record {
	t.Helper()
	return f.k.ReadTopic(t, f.cfg.DLQTopic, testkit.ReadCommitted())
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
