package run_test

import (
	"context"
	"errors"
	"fmt"
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

// Batches whose records are all dead-lettered (no output) inside an open
// window still move the offsets when the window closes, MaxKeys reached
// exactly closes the window, and the window metrics add up: merges are
// counted and no key is held once every window is written.
func TestWindowDeadLetterBatchesAdvanceOffsets(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.BatchMaxRecords = 10
	cfg.Window = run.WindowConfig{MaxKeys: 5, MaxAge: time.Minute}
	cl, adm := k.Client(t), k.Admin(t)
	const n, keys = 60, 5
	produce(t, cl, cfg.Topics[0], n, keys, nil)
	stage := func(ctx context.Context, m msg) ([]tally, error) {
		var i int
		if _, err := fmt.Sscanf(m.Value, "v-%d", &i); err == nil && i >= 20 {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "test.late", errors.New("too late"))
		}
		return toTally(ctx, m)
	}
	sink := &tallySink{state: map[string]tally{}}
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, stage, stages.Sink[tally](sink), run.WithRegisterer(reg))
	waitCommittedAtEnd(t, adm, cfg.Group, cfg.Topics[0], 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	state, writes := sink.snapshot()
	if got := sink.total(); got != 20 || len(state) != keys {
		t.Errorf("sink holds %d records of %d keys, want 20 of %d", got, len(state), keys)
	}
	for i, w := range writes {
		if len(w) > cfg.Window.MaxKeys {
			t.Errorf("write %d has %d outputs, want ≤ MaxKeys %d", i, len(w), cfg.Window.MaxKeys)
		}
	}
	if dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted()); len(dlq) != n-20 {
		t.Errorf("DLQ has %d records, want %d", len(dlq), n-20)
	}
	if got := testkit.Metric(t, reg, "sluice_window_keys"); got != 0 {
		t.Errorf("sluice_window_keys = %v, want 0", got)
	}
	writtenOutputs := 0
	for _, w := range writes {
		writtenOutputs += len(w)
	}
	if got := testkit.Metric(t, reg, "sluice_window_merged_total"); int(got) != 20-writtenOutputs {
		t.Errorf("sluice_window_merged_total = %v, want %d (20 outputs in %d written)", got, 20-writtenOutputs, writtenOutputs)
	}
}
