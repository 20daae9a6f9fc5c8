package ticks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/kconf"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages/ratelimit"
	"github.com/sluicehq/sluice/stages/run"
)

// memberEnv, when set, turns the test binary into a ticks worker process
// configured by the JSON memberSpec in its value (see TestMain).
const memberEnv = "SLUICE_TICKS_TEST_MEMBER"

// TestMain lets the test binary run as a ticks group member in a child
// process, so that a member can be killed with SIGKILL.
func TestMain(m *testing.M) {
	testkit.RunChild(memberEnv, member)
	os.Exit(m.Run())
}

// memberSpec is everything a member process needs; it travels in memberEnv.
// It holds credentials: never log it.
type memberSpec struct {
	Kafka       kconf.Config
	RedisURL    string
	RedisPrefix string
	// StoreDir is the directory store's root; otherwise S3 and S3Prefix.
	StoreDir string
	S3       objstore.S3Config
	S3Prefix string

	TasksTopic, JobsTopic, DLQTopic, Group string

	// SessionLength and MeanGap shape the synthetic source (the parent's
	// source must be built the same way); Latency delays each call.
	SessionLength, MeanGap, Latency time.Duration
	// HangAfterPut > 0: the member blocks right after its n-th successful
	// segment-file write (the file exists, the cursor has not moved).
	HangAfterPut int64
	// HangAtFetch > 0: the member blocks inside its n-th source call.
	HangAtFetch int64
	// Marker is the file created when the member starts to hang.
	Marker string
}

// killSynthetic is the synthetic source both members use: a one-minute
// session of ~1200 ticks, cut into 100-tick segments by killConfig.
func killSynthetic(s memberSpec) ticks.SyntheticConfig {
	return ticks.SyntheticConfig{Length: s.SessionLength, MeanGap: s.MeanGap, Latency: s.Latency}
}

// killConfig is the pipeline config both members run with (the parent's
// and the child's must match except for the source).
func killConfig(s memberSpec) ticks.Config {
	return ticks.Config{
		TasksTopic: s.TasksTopic, JobsTopic: s.JobsTopic, DLQTopic: s.DLQTopic, Group: s.Group,
		SegmentMaxTicks: 100,
		RateLimit: ticks.RateLimitConfig{
			Windows:   []ratelimit.Window{{Size: time.Second, Limit: 20}, {Size: time.Minute, Limit: 1000}},
			KeyPrefix: s.RedisPrefix,
			Backoff:   ratelimit.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		},
		Retry:   run.RetryPolicy{MaxAttempts: 6, Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Runtime: run.Config{BatchLinger: 5 * time.Millisecond, CommitInterval: 200 * time.Millisecond, RevokeTimeout: 10 * time.Second},
	}
}

// member runs one ticks worker from the spec until SIGTERM (or SIGKILL).
func member(specJSON string) int {
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "ticks member: %s: %v\n", what, err)
		return 2
	}
	var spec memberSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fail("decode spec", errors.New("invalid JSON")) // the spec holds secrets: no detail
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	kopts, err := spec.Kafka.Opts()
	if err != nil {
		return fail("kafka options", err)
	}
	// A short session: the group notices the killed member within 6s (the
	// brokers' minimum) instead of franz-go's default 45s.
	kopts = append(kopts, kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond), kgo.FetchMaxWait(100*time.Millisecond))
	ropts, err := redis.ParseURL(spec.RedisURL)
	if err != nil {
		return fail("redis URL", errors.New("unparsable"))
	}
	rc := redis.NewClient(ropts)
	defer rc.Close()
	var store objstore.Store
	if spec.StoreDir != "" {
		if store, err = objstore.NewDir(spec.StoreDir); err != nil {
			return fail("directory store", err)
		}
	} else {
		s3, err := objstore.NewS3(ctx, spec.S3)
		if err != nil {
			return fail("S3 store", err)
		}
		store = objstore.WithPrefix(s3, spec.S3Prefix)
	}
	hang := func(ctx context.Context) error {
		if err := os.WriteFile(spec.Marker, nil, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "ticks member: marker: %v\n", err)
		}
		<-ctx.Done()
		return ctx.Err()
	}
	cfg := killConfig(spec)
	cfg.Source = &hangingSource{Source: ticks.NewSynthetic(killSynthetic(spec)), at: spec.HangAtFetch, hang: hang}
	env := pipelines.Env{
		Kafka:      kopts,
		Redis:      rc,
		Objects:    &hangingStore{Store: store, after: spec.HangAfterPut, hang: hang},
		Registerer: prometheus.NewRegistry(),
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	w, err := ticks.NewWorker(env, cfg)
	if err != nil {
		return fail("worker", err)
	}
	if err := w.Run(ctx); err != nil {
		return fail("run", err)
	}
	return 0
}

// hangingStore blocks right after its after-th successful Put.
type hangingStore struct {
	objstore.Store
	after int64
	n     atomic.Int64
	hang  func(context.Context) error
}

func (s *hangingStore) Put(ctx context.Context, key string, data []byte, ct string) error {
	if err := s.Store.Put(ctx, key, data, ct); err != nil {
		return err
	}
	if s.n.Add(1) == s.after {
		return s.hang(ctx)
	}
	return nil
}

// hangingSource blocks in its at-th HistoricalTicks call.
type hangingSource struct {
	ticks.Source
	at   int64
	n    atomic.Int64
	hang func(context.Context) error
}

func (s *hangingSource) HistoricalTicks(ctx context.Context, symbol string, startMs, endMs int64, max int) ([]ticks.Tick, error) {
	if s.n.Add(1) == s.at {
		return nil, s.hang(ctx)
	}
	return s.Source.HistoricalTicks(ctx, symbol, startMs, endMs, max)
}

// recordingSource records the start of every HistoricalTicks call.
type recordingSource struct {
	ticks.Source
	mu     sync.Mutex
	starts []int64
}

func (s *recordingSource) HistoricalTicks(ctx context.Context, symbol string, startMs, endMs int64, max int) ([]ticks.Tick, error) {
	s.mu.Lock()
	s.starts = append(s.starts, startMs)
	s.mu.Unlock()
	return s.Source.HistoricalTicks(ctx, symbol, startMs, endMs, max)
}

func (s *recordingSource) Starts() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.starts)
}

// newKillFixture provisions Kafka, Redis and the object store like
// newFixture, but keeps what a member process needs to reach them: kfake
// listens on TCP, miniredis and redis-server too, and a directory store is
// shared through the file system. The fixture's source records the calls
// of the in-process member.
func newKillFixture(t *testing.T) (*fixture, *recordingSource, memberSpec) {
	t.Helper()
	f := &fixture{reg: prometheus.NewRegistry()}
	f.k = testkit.NewKafka(t, testkit.FakeOK())
	f.redis = testkit.NewRedis(t, testkit.FakeOK())
	objs := testkit.NewObjectStore(t, testkit.FakeOK())
	spec := memberSpec{
		Kafka: f.k.Config, RedisURL: f.redis.URL, RedisPrefix: f.redis.Prefix,
		TasksTopic: f.k.Topic(t, "ingest.tasks", 3),
		JobsTopic:  f.k.Topic(t, "ingest.jobs", 3, map[string]*string{"cleanup.policy": ptr("compact")}),
		DLQTopic:   f.k.Topic(t, "ingest.dlq", 1),
		Group:      testkit.Name(t, "ticks"),
		// ~1200 ticks: 12 or 13 segments of 100 ticks.
		SessionLength: time.Minute, MeanGap: 50 * time.Millisecond,
		Marker: filepath.Join(t.TempDir(), "hung"),
	}
	if objs.Dir != "" {
		spec.StoreDir = objs.Dir
	} else {
		spec.S3, spec.S3Prefix = objs.S3Config(), objs.Prefix
	}
	f.store = &recordingStore{Store: objs.Store(t)}
	t.Logf("using %s, %s, %s", f.k, f.redis, objs)
	f.src = ticks.NewSynthetic(killSynthetic(spec))
	rec := &recordingSource{Source: f.src}
	f.cfg = killConfig(spec)
	f.cfg.Source = rec
	f.connect(t)
	return f, rec, spec
}

// Killing the worker mid-job (SIGKILL, no shutdown path): another member of
// the group restores the job's state, resumes from the cursor the killed
// member had committed, and the final files are exact. The member process
// is killed at three points: right after it wrote a segment file but before
// the cursor moved, inside a source fetch, and wherever it happens to be
// (a slow source, killed once two segments are done).
func TestKilledWorkerResumesFromCursor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		spec func(*memberSpec)
		// wantPending is the number of files beyond the cursor at the kill
		// (-1: either); wantSegments the segments the state counted (0: ≥ 2).
		wantPending, wantSegments int
	}{
		{"after_put", func(s *memberSpec) { s.HangAfterPut = 3 }, 1, 2},
		{"mid_fetch", func(s *memberSpec) { s.HangAtFetch = 3 }, 0, 2},
		{"free_running", func(s *memberSpec) { s.Latency = 400 * time.Millisecond }, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, rec, spec := newKillFixture(t)
			tc.spec(&spec)
			a := testkit.StartChild(t, memberEnv, spec)
			res := f.trigger(t, "CL")

			// Wait for the kill point, then SIGKILL member A.
			if spec.HangAfterPut > 0 || spec.HangAtFetch > 0 {
				testkit.WaitFor(t, 45*time.Second, "member A to reach the kill point", func() bool {
					if a.Exited() {
						t.Fatalf("member A exited on its own: %v", a.Err())
					}
					_, err := os.Stat(spec.Marker)
					return err == nil
				})
			} else {
				f.waitJob(t, res.JobKey, 45*time.Second, "member A past 2 segments", func(s *ticks.JobState) bool {
					if a.Exited() {
						t.Fatalf("member A exited on its own: %v", a.Err())
					}
					return s.Segments >= 2
				})
			}
			a.Kill(t)
			// Requests A sent just before it died (a produce, a PUT) may
			// still land; give them a moment before taking the snapshot.
			time.Sleep(time.Second)

			ctx := testkit.Context(t)
			mid := f.job(t, res.JobKey)
			if mid == nil || mid.Status != ticks.StatusRunning || mid.JobInstanceID != res.JobInstanceID || mid.Cursor >= mid.EndTime {
				t.Fatalf("state at the kill %+v; want instance %s RUNNING before the session end", mid, res.JobInstanceID)
			}
			if mid.Segments < 2 || tc.wantSegments > 0 && mid.Segments != tc.wantSegments {
				t.Fatalf("state at the kill counts %d segments, want %d (≥ 2)", mid.Segments, tc.wantSegments)
			}
			atKill, bad, err := ticks.ListSegments(ctx, f.store, "CL", testDate)
			if err != nil || len(bad) > 0 {
				t.Fatalf("segment files at the kill: %v (unreadable %v)", err, bad)
			}
			contents := map[string][]byte{}
			var pending []ticks.Segment // written by A beyond its cursor
			for _, s := range atKill {
				data, err := f.store.Get(ctx, s.Key)
				if err != nil {
					t.Fatal(err)
				}
				contents[s.Key] = data
				if s.RangeStart > mid.Cursor {
					pending = append(pending, s)
				}
			}
			if len(atKill) < 2 || len(pending) > 1 || len(pending) == 1 && pending[0].RangeStart != mid.Cursor+1 ||
				tc.wantPending >= 0 && len(pending) != tc.wantPending {
				t.Fatalf("at the kill: cursor %d, %d files, %d beyond the cursor %v; want %d beyond it, starting at cursor+1",
					mid.Cursor, len(atKill), len(pending), pending, tc.wantPending)
			}
			jobsAtKill := len(f.k.ReadTopic(t, f.cfg.JobsTopic))
			t.Logf("killed member A at cursor %d after %d segments; %d files, %d beyond the cursor", mid.Cursor, mid.Segments, len(atKill), len(pending))

			// Member B (in process: its source calls and writes are recorded).
			f.startWorker(t)
			st := f.waitJob(t, res.JobKey, 45*time.Second, "COMPLETED", func(s *ticks.JobState) bool { return s.Status == ticks.StatusCompleted })

			// Exactly the source's ticks, no gap/overlap/duplicate.
			segs := f.checkExact(t, "CL", 0)
			all := mustTicks(t, f, "CL")
			if st.JobInstanceID != res.JobInstanceID || st.Cursor != st.EndTime || st.Segments != len(segs) || st.Ticks != int64(len(all)) {
				t.Errorf("final state %+v; want instance %s, cursor = end, %d segments, %d ticks", st, res.JobInstanceID, len(segs), len(all))
			}

			// Every file of A is still there, byte for byte.
			final := map[string]ticks.Segment{}
			for _, s := range segs {
				final[s.Key] = s
			}
			for k, data := range contents {
				if _, ok := final[k]; !ok {
					t.Errorf("file %s written before the kill is gone", k)
					continue
				}
				now, err := f.store.Get(ctx, k)
				if err != nil || !bytes.Equal(now, data) {
					t.Errorf("file %s written before the kill changed (%v)", k, err)
				}
			}

			// B resumed from the cursor: it fetched and wrote exactly the
			// segments after the cursor that A had not written, each once,
			// and reused A's pending file without fetching it.
			var wantStarts []int64
			var wantPuts []string
			for _, s := range segs {
				if _, ok := contents[s.Key]; !ok {
					wantStarts = append(wantStarts, s.RangeStart)
					wantPuts = append(wantPuts, s.Key)
				}
			}
			if last := segs[len(segs)-1]; !last.Final {
				// The session's last file is full: one more fetch found nothing.
				wantStarts = append(wantStarts, last.RangeEnd+1)
			}
			if got := rec.Starts(); !slices.Equal(got, wantStarts) {
				t.Errorf("member B fetched from %v; want exactly %v (after cursor %d, skipping the %d file(s) A wrote)", got, wantStarts, mid.Cursor, len(pending))
			}
			if got := f.store.Puts(); !slices.Equal(got, wantPuts) {
				t.Errorf("member B wrote %v; want exactly %v", got, wantPuts)
			}
			for _, s := range rec.Starts() {
				if s <= mid.Cursor {
					t.Errorf("member B fetched from %d, at or before the cursor %d", s, mid.Cursor)
				}
			}
			if got := testkit.Metric(t, f.reg, "sluice_ticks_segments_total", "result", "skipped"); got != float64(len(pending)) {
				t.Errorf("member B skipped %v existing segment files, want %d", got, len(pending))
			}

			// The state B wrote starts past the cursor A left and only moves
			// forward.
			after := f.k.ReadTopic(t, f.cfg.JobsTopic)[jobsAtKill:]
			if len(after) == 0 {
				t.Fatal("no state written after the kill")
			}
			prev := mid.Cursor
			for i, r := range after {
				s := decodeState(t, r)
				if s.JobInstanceID != res.JobInstanceID || s.Cursor <= prev {
					t.Errorf("state %d after the kill: instance %s cursor %d, want instance %s and a cursor past %d", i, s.JobInstanceID, s.Cursor, res.JobInstanceID, prev)
				}
				prev = s.Cursor
			}
			if first := decodeState(t, after[0]); first.LastStart != mid.Cursor+1 {
				t.Errorf("first segment done after the kill starts at %d, want cursor+1 = %d", first.LastStart, mid.Cursor+1)
			}
			if n := len(f.k.ReadTopic(t, f.cfg.DLQTopic, testkit.ReadCommitted())); n != 0 {
				t.Errorf("%d DLQ records", n)
			}
		})
	}
}
