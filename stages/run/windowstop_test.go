package run_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// stuckTallySink blocks every Write, ignoring the context, until release
// is closed (a driver stuck on a dead connection); returned is closed when
// the first blocked Write returned.
type stuckTallySink struct {
	*tallySink
	entered, release, returned chan struct{}
	enterOnce, returnOnce      sync.Once
}

func (s *stuckTallySink) Write(ctx context.Context, batch []tally) error {
	s.enterOnce.Do(func() { close(s.entered) })
	<-s.release
	defer s.returnOnce.Do(func() { close(s.returned) })
	return s.tallySink.Write(ctx, batch)
}

// A worker abandoned in a window write that ignores its context gives its
// window's keys back to the MaxTotalKeys budget when it is abandoned, not
// only if the write ever returns: otherwise every later window of the
// member would count the stuck keys and close at once. When the stuck
// write returns later, the keys are not given back a second time.
func TestWindowAbandonedWorkerReleasesKeys(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.Window = run.WindowConfig{MaxKeys: 1000, MaxAge: time.Minute, MaxTotalKeys: 5000}
	cfg.RevokeTimeout = 300 * time.Millisecond
	produce(t, k.Client(t), cfg.Topics[0], 40, 8, nil)
	sink := &stuckTallySink{tallySink: &tallySink{state: map[string]tally{}},
		entered: make(chan struct{}), release: make(chan struct{}), returned: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-sink.release:
		default:
			close(sink.release)
		}
	})
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, toTally, stages.Sink[tally](sink), run.WithRegisterer(reg))
	select {
	case <-sink.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the window was never written")
	}
	if got := testkit.Metric(t, reg, "sluice_window_keys"); got <= 0 {
		t.Fatalf("sluice_window_keys = %v during the window's write, want > 0", got)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run with a stuck sink: %v", err)
	}
	if got := testkit.Metric(t, reg, "sluice_window_keys"); got != 0 {
		t.Errorf("sluice_window_keys = %v after the worker was abandoned, want 0", got)
	}
	close(sink.release) // the abandoned write returns now
	select {
	case <-sink.returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the released write did not return")
	}
	for range 10 { // the abandoned worker exits and drops its window
		time.Sleep(20 * time.Millisecond)
		if got := testkit.Metric(t, reg, "sluice_window_keys"); got != 0 {
			t.Fatalf("sluice_window_keys = %v after the abandoned worker exited, want 0", got)
		}
	}
}

// A worker asked to stop (shutdown or revocation) while the stage retries
// a record writes its open window, the records before the retried one
// included, and commits it, as the batch path flushes the done part of its
// batch; only the retried record and those after it are redelivered.
func TestWindowStopDuringStageRetryWritesWindow(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.Window = run.WindowConfig{MaxKeys: 1000, MaxAge: time.Minute}
	cfg.Retry = run.RetryPolicy{MaxAttempts: 1000, Initial: time.Minute, Max: time.Minute}
	cl, adm := k.Client(t), k.Admin(t)
	const n = 11 // v-10 is retried for ever
	produce(t, cl, cfg.Topics[0], n, 3, nil)
	retrying := make(chan struct{})
	var once sync.Once
	stage := func(ctx context.Context, m msg) ([]tally, error) {
		if m.Value == "v-10" {
			once.Do(func() { close(retrying) })
			return nil, stages.Retry(errors.New("service unavailable"))
		}
		return toTally(ctx, m)
	}
	sink := &tallySink{state: map[string]tally{}}
	_, stop := start(t, k, cfg, stage, stages.Sink[tally](sink))
	select {
	case <-retrying:
	case <-time.After(30 * time.Second):
		t.Fatal("the stage never saw v-10")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := sink.total(); got != n-1 {
		t.Errorf("sink holds %d records, want the %d before the retried one", got, n-1)
	}
	if got := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0]; got != n-1 {
		t.Errorf("committed offset %d, want %d (up to the retried record)", got, n-1)
	}
}
