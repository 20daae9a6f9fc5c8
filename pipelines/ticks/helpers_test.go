package ticks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/ratelimit"
	"github.com/sluicehq/sluice/stages/run"
)

const testDate = "2025-11-18"

// recordingStore records every Put key (to prove what a zombie did not write).
type recordingStore struct {
	objstore.Store
	mu   sync.Mutex
	puts []string
}

func (s *recordingStore) Put(ctx context.Context, key string, data []byte, ct string) error {
	s.mu.Lock()
	s.puts = append(s.puts, key)
	s.mu.Unlock()
	return s.Store.Put(ctx, key, data, ct)
}

func (s *recordingStore) Puts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.puts...)
}

type fixture struct {
	k       *testkit.Kafka
	redis   *testkit.Redis
	store   *recordingStore
	src     *ticks.Synthetic
	cfg     ticks.Config
	reg     *prometheus.Registry
	env     pipelines.Env
	coord   *ticks.Coordinator
	members atomic.Int32
}

// newFixture provisions Kafka (KAFKA_BROKERS or kfake), Redis (REDIS_URL,
// redis-server or miniredis), the object store (S3_ENDPOINT, minio or a
// directory), co-partitioned test topics and a synthetic source with a
// one-minute session of ~1200 ticks cut into ~100-tick segments.
func newFixture(t *testing.T, src ticks.SyntheticConfig, mod func(*ticks.Config)) *fixture {
	t.Helper()
	f := &fixture{reg: prometheus.NewRegistry()}
	f.k = testkit.NewKafka(t, testkit.FakeOK())
	f.redis = testkit.NewRedis(t, testkit.FakeOK())
	os := testkit.NewObjectStore(t, testkit.FakeOK())
	f.store = &recordingStore{Store: os.Store(t)}
	t.Logf("using %s, %s, %s", f.k, f.redis, os)
	if src.Length == 0 {
		src.Length = time.Minute
	}
	if src.MeanGap == 0 {
		src.MeanGap = 50 * time.Millisecond
	}
	f.src = ticks.NewSynthetic(src)
	f.cfg = ticks.Config{
		TasksTopic:      f.k.Topic(t, "ingest.tasks", 3),
		JobsTopic:       f.k.Topic(t, "ingest.jobs", 3, map[string]*string{"cleanup.policy": ptr("compact")}),
		DLQTopic:        f.k.Topic(t, "ingest.dlq", 1),
		Group:           testkit.Name(t, "ticks"),
		Source:          f.src,
		SegmentMaxTicks: 100,
		RateLimit: ticks.RateLimitConfig{
			Windows:   []ratelimit.Window{{Size: time.Second, Limit: 20}, {Size: time.Minute, Limit: 1000}},
			KeyPrefix: f.redis.Prefix,
			Backoff:   ratelimit.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		},
		Retry:   run.RetryPolicy{MaxAttempts: 6, Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Runtime: run.Config{BatchLinger: 5 * time.Millisecond, CommitInterval: 200 * time.Millisecond, RevokeTimeout: 10 * time.Second},
	}
	if mod != nil {
		mod(&f.cfg)
	}
	f.connect(t)
	return f
}

// connect builds the fixture's pipeline environment and coordinator from its
// services, store, registry and config.
func (f *fixture) connect(t *testing.T) {
	t.Helper()
	f.env = pipelines.Env{
		Kafka:      append(f.k.Opts(t), kgo.FetchMaxWait(100*time.Millisecond)),
		Redis:      f.redis.Client,
		Objects:    f.store,
		Registerer: f.reg,
		Logger:     testLogger(t),
	}
	f.coord = ticks.NewCoordinator(f.k.Client(t), f.env.Kafka, f.cfg)
}

func ptr[T any](v T) *T { return &v }

// startWorker runs a worker and waits until it is ready; stop cancels it and
// waits for Run to return (cleanup does so if the test does not).
func (f *fixture) startWorker(t *testing.T) (stop func()) {
	t.Helper()
	env := f.env
	// Each member registers its metrics under its own label (one process
	// runs one worker in production).
	env.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"member": fmt.Sprint(f.members.Add(1))}, f.reg)
	w, err := ticks.NewWorker(env, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopRun := testkit.RunInBackground(t, "worker", w.Run)
	testkit.WaitFor(t, 30*time.Second, "worker ready", w.Ready)
	return func() {
		if err := stopRun(); err != nil {
			t.Errorf("worker Run: %v", err)
		}
	}
}

func (f *fixture) trigger(t *testing.T, symbol string) ticks.TriggerResult {
	t.Helper()
	res, err := f.coord.Trigger(testkit.Context(t), ticks.TriggerRequest{Symbol: symbol, Date: testDate, AccountID: "U1"})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (f *fixture) job(t *testing.T, key string) *ticks.JobState {
	t.Helper()
	st, err := ticks.ReadJob(testkit.Context(t), f.env.Kafka, f.cfg.JobsTopic, key)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitJob polls the jobs topic until cond holds for the job's state.
func (f *fixture) waitJob(t *testing.T, key string, timeout time.Duration, what string, cond func(*ticks.JobState) bool) *ticks.JobState {
	t.Helper()
	var st *ticks.JobState
	testkit.WaitFor(t, timeout, what, func() bool {
		st = f.job(t, key)
		return st != nil && cond(st)
	})
	return st
}

// checkExact asserts that the job's segment files together hold exactly the
// source's ticks of the session from `from` on: no gap, no overlap, no
// duplicate, and contiguous covered ranges ending at the session end.
func (f *fixture) checkExact(t *testing.T, symbol string, from int64) []ticks.Segment {
	t.Helper()
	got, segs, err := ticks.ReadTicks(testkit.Context(t), f.store, symbol, testDate)
	if err != nil {
		t.Fatal(err)
	}
	all, err := f.src.Ticks(symbol, testDate)
	if err != nil {
		t.Fatal(err)
	}
	var want []ticks.Tick
	for _, tk := range all {
		if tk.TimeMs >= from {
			want = append(want, tk)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: files hold %d ticks, source has %d", symbol, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("%s: tick %d is %+v, want %+v", symbol, i, got[i], want[i])
			break
		}
	}
	sess, _ := f.src.TradingHours(context.Background(), symbol, testDate)
	next := max(from, sess.Start)
	for _, s := range segs {
		if s.RangeStart != next {
			t.Errorf("%s: segment %s starts at %d, want %d (gap or overlap)", symbol, s.Key, s.RangeStart, next)
		}
		next = s.RangeEnd + 1
	}
	// The files cover the session to its end, except when the last fetch
	// found no tick (a session whose tick count is a multiple of the segment
	// size): no file is written for an empty range.
	if len(segs) == 0 {
		t.Errorf("%s: no segment files", symbol)
	} else if last := segs[len(segs)-1]; last.RangeEnd != sess.End && (last.Final || len(want) == 0 || want[len(want)-1].TimeMs != last.LastTick) {
		t.Errorf("%s: segments end at %d, neither the session end %d nor the last tick", symbol, last.RangeEnd, sess.End)
	}
	return segs
}

func decodeState(t *testing.T, r *kgo.Record) ticks.JobState {
	t.Helper()
	var st ticks.JobState
	if err := json.Unmarshal(r.Value, &st); err != nil {
		t.Fatalf("state record %s: %v", r.Value, err)
	}
	return st
}

func hasInstance(keys []string, instance string) []string {
	var out []string
	for _, k := range keys {
		if strings.Contains(k, "_"+instance+".parquet") {
			out = append(out, k)
		}
	}
	return out
}

// badTask is one bad or odd record of ingest.tasks and what must become of
// it: a dead letter with reason and rule, or (reason "") nothing at all —
// no DLQ record and no job state.
type badTask struct {
	name   string
	key    string
	value  []byte
	reason stages.Reason
	rule   string
}

func taskJSON(t *testing.T, task ticks.Task) []byte {
	t.Helper()
	v, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkDeadLetters pairs the records of dlq with the cases of want by key
// and calls check with each case, its record and the record's headers. A
// record whose key is not in want, or a second record of a key, is an
// error, and so is a key of want without a record.
func checkDeadLetters(t *testing.T, dlq []*kgo.Record, want map[string]badTask, check func(c badTask, r *kgo.Record, h map[string]string)) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range dlq {
		h := testkit.Headers(r)
		c, ok := want[string(r.Key)]
		if !ok || seen[c.key] {
			t.Errorf("unexpected DLQ record key %.40q reason %q rule %q error %q", r.Key, h[stages.HeaderReason], h[stages.HeaderRule], h[stages.HeaderError])
			continue
		}
		seen[c.key] = true
		check(c, r, h)
	}
	for k, c := range want {
		if !seen[k] {
			t.Errorf("%s: no DLQ record", c.name)
		}
	}
}

// tradingHours returns the source's session of symbol on testDate.
func (f *fixture) tradingHours(t *testing.T, symbol string) ticks.Session {
	t.Helper()
	sess, err := f.src.TradingHours(testkit.Context(t), symbol, testDate)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}
