package run_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// stuckSink blocks its first Write, ignoring the context, until release is
// closed (a driver stuck on a dead connection); later writes go to mem.
type stuckSink struct {
	entered chan struct{} // closed when the first Write started
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	first   bool
	mem     *memsink.Sink[msg]
}

func newStuckSink() *stuckSink {
	return &stuckSink{entered: make(chan struct{}), release: make(chan struct{}), mem: memsink.New[msg]()}
}

func (s *stuckSink) Write(ctx context.Context, batch []msg) error {
	s.mu.Lock()
	first := !s.first
	s.first = true
	s.mu.Unlock()
	if first {
		s.once.Do(func() { close(s.entered) })
		<-s.release
	}
	return s.mem.Write(ctx, batch)
}

// A sink that never returns (and ignores its context) does not hang the
// shutdown: the worker is abandoned after RevokeTimeout, nothing is
// committed for its batch, and when the stuck write returns later it marks
// nothing. A restarted runner re-delivers every record.
func TestShutdownAbandonsSinkThatIgnoresContext(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.RevokeTimeout = 300 * time.Millisecond
	cl, adm := k.Client(t), k.Admin(t)
	const n = 20
	produce(t, cl, cfg.Topics[0], n, 3, nil)

	stuck := newStuckSink()
	t.Cleanup(func() {
		select {
		case <-stuck.release:
		default:
			close(stuck.release)
		}
	})
	_, stop := start(t, k, cfg, passthrough, stages.Sink[msg](stuck))
	select {
	case <-stuck.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("sink never called")
	}
	if err := stop(); err != nil {
		t.Fatalf("Run with a stuck sink: %v", err)
	}
	close(stuck.release) // the abandoned write lands now, after the shutdown
	time.Sleep(200 * time.Millisecond)
	if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); len(c) != 0 {
		t.Fatalf("committed %v although the batch's write never returned before the shutdown", c)
	}

	sink := memsink.New[msg]()
	_, stop2 := start(t, k, cfg, passthrough, sink)
	testkit.WaitFor(t, 30*time.Second, "the restarted runner to commit every record", func() bool {
		return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == n
	})
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if sink.Len() != n {
		t.Fatalf("restarted runner wrote %d records, want %d", sink.Len(), n)
	}
}

// The coordinator refuses every OffsetCommit (COORDINATOR_NOT_AVAILABLE)
// during the shutdown: Run still returns, nothing is committed, and a
// restarted runner re-delivers every record.
func TestShutdownCommitRefusedRedelivers(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.CommitInterval = time.Hour // only the shutdown commits
	cfg.RevokeTimeout = time.Second
	cl, adm := k.Client(t), k.Admin(t)
	const n = 10
	produce(t, cl, cfg.Topics[0], n, 3, nil)
	var refuse atomic.Bool
	var refused atomic.Int32
	k.Fake().ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		if !refuse.Load() {
			return nil, nil, false
		}
		refused.Add(1)
		return offsetCommitRefusal(req, kerr.CoordinatorNotAvailable.Code), nil, true
	})
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, passthrough, sink)
	testkit.WaitFor(t, 30*time.Second, "every record written", func() bool { return sink.Len() == n })
	refuse.Store(true)
	if err := stop(); err != nil {
		t.Fatalf("Run with commits refused: %v", err)
	}
	if refused.Load() == 0 {
		t.Fatal("no commit was attempted on shutdown")
	}
	if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); len(c) != 0 {
		t.Fatalf("committed %v although every commit was refused", c)
	}
	refuse.Store(false)
	again := memsink.New[msg]()
	_, stop2 := start(t, k, cfg, passthrough, again)
	testkit.WaitFor(t, 30*time.Second, "the re-delivery", func() bool { return again.Len() == n })
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if got := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0]; got != n {
		t.Fatalf("committed %d after the restart, want %d", got, n)
	}
}

// A periodic commit the coordinator refuses is counted as a commit error
// and logged, while the runner keeps consuming; once commits are accepted
// again the marks are committed. A refusal that only says a rebalance is
// under way is logged at INFO and not counted.
func TestPeriodicCommitRefusedCounted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code    *kerr.Error
		log     string
		counted bool
	}{
		{kerr.GroupAuthorizationFailed, "level=WARN msg=\"periodic offset commit refused;", true},
		{kerr.RebalanceInProgress, "level=INFO msg=\"periodic offset commit refused during a rebalance", false},
	} {
		t.Run(tc.code.Message, func(t *testing.T) {
			t.Parallel()
			periodicCommitRefused(t, tc.code, tc.log, tc.counted)
		})
	}
}

func periodicCommitRefused(t *testing.T, code *kerr.Error, logged string, counted bool) {
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.CommitInterval = 200 * time.Millisecond
	cl, adm := k.Client(t), k.Admin(t)
	const n = 10
	produce(t, cl, cfg.Topics[0], n, 3, nil)
	var refuse atomic.Bool
	refuse.Store(true)
	k.Fake().ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		if !refuse.Load() {
			return nil, nil, false
		}
		return offsetCommitRefusal(req, code.Code), nil, true
	})
	reg := prometheus.NewRegistry()
	var logs logBuffer
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, passthrough, sink, run.WithRegisterer(reg), run.WithLogger(logs.logger()))
	testkit.WaitFor(t, 30*time.Second, "every record written", func() bool { return sink.Len() == n })
	testkit.WaitFor(t, 30*time.Second, "two refused periodic commits logged", func() bool {
		return len(logs.lines(logged, code.Message, cfg.Topics[0]+"/0")) >= 2
	})
	got := testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "commit")
	if counted && got < 2 || !counted && got != 0 {
		t.Fatalf("sluice_runtime_errors_total{kind=commit} = %v after 2 refusals (counted: %v)", got, counted)
	}
	if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); len(c) != 0 {
		t.Fatalf("committed %v although every commit was refused", c)
	}
	refuse.Store(false)
	testkit.WaitFor(t, 30*time.Second, "the marks committed once commits are accepted", func() bool {
		return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
