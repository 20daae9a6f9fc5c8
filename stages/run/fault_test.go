package run_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
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
