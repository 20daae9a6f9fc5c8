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
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/sinks/objstore"
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
	var base objstore.Store
	if os.Dir != "" {
		d, err := objstore.NewDir(os.Dir)
		if err != nil {
			t.Fatal(err)
		}
		base = d
	} else {
		s3, err := objstore.NewS3(testkit.Context(t), objstore.S3Config{Endpoint: os.Endpoint, AccessKey: os.AccessKey, SecretKey: os.SecretKey, Bucket: os.Bucket, Secure: os.Secure})
		if err != nil {
			t.Fatal(err)
		}
		base = objstore.WithPrefix(s3, os.Prefix)
	}
	f.store = &recordingStore{Store: base}
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
	f.env = pipelines.Env{
		Kafka:      append(f.k.Opts(t), kgo.FetchMaxWait(100*time.Millisecond)),
		Redis:      f.redis.Client,
		Objects:    f.store,
		Registerer: f.reg,
		Logger:     testLogger(t),
	}
	f.coord = ticks.NewCoordinator(f.k.Client(t), f.env.Kafka, f.cfg)
	return f
}

func ptr[T any](v T) *T { return &v }

// startWorker runs a worker; stop cancels it and waits for Run to return.
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
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	var stopping atomic.Bool
	go func() {
		err := w.Run(ctx)
		if !stopping.Load() {
			t.Errorf("worker stopped on its own: %v", err)
		}
		errc <- err
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			stopping.Store(true)
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("worker Run: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Errorf("worker did not stop within 60s")
			}
		})
	}
	t.Cleanup(stop)
	waitFor(t, 30*time.Second, "worker ready", w.Ready)
	return stop
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
	waitFor(t, timeout, what, func() bool {
		st = f.job(t, key)
		return st != nil && cond(st)
	})
	return st
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
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

// readTopic returns every record of topic from the start to its end.
func readTopic(t *testing.T, f *fixture, topic string) []*kgo.Record {
	t.Helper()
	ctx := testkit.ContextTimeout(t, 30*time.Second)
	adm := f.k.Admin(t)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total == 0 {
		return nil
	}
	cl := f.k.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	var out []*kgo.Record
	for int64(len(out)) < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %d of %d records", topic, len(out), total)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				ok := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						ok = true
					}
				}
				if !ok {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
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
