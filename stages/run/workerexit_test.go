package run

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A worker that has exited never pauses its partition again: the poll
// loop's backpressure may still pause it from a list of full workers it
// took before the worker was detached, and nothing would resume that
// pause, so the partition would never be fetched again on this member.
func TestSetPauseAfterWorkerExitIsNoOp(t *testing.T) {
	t.Parallel()
	cl, m := pauseClient(t, 1)
	r := &Runner[string, string]{cl: cl, m: m, base: t.Context()}
	w := newWorker(r, tp{"in", 0})
	m.assigned.Inc()

	// Paused while running: exit resumes it.
	w.setPause(pauseBackpressure, true)
	if got := cl.PauseFetchPartitions(nil); len(got["in"]) != 1 {
		t.Fatalf("paused before exit: %v, want partition 0", got)
	}
	w.exit()
	if got := cl.PauseFetchPartitions(nil); len(got) != 0 {
		t.Fatalf("paused after exit: %v, want none", got)
	}
	// Backpressure from a stale list of full workers, after the exit.
	w.setPause(pauseBackpressure, true)
	if got := cl.PauseFetchPartitions(nil); len(got) != 0 {
		t.Fatalf("an exited worker paused its partition: %v", got)
	}
	if v := testutil.ToFloat64(m.paused); v != 0 {
		t.Fatalf("sluice_paused_partitions = %v, want 0", v)
	}
	select {
	case <-w.done:
	default:
		t.Fatal("exit did not close done")
	}
}

// pauseClient returns a client of a kfake cluster with topic "in" of
// partitions partitions, for tests of fetch pauses (PauseFetchPartitions(nil)
// lists them), and the runner metrics to go with it. Both close with t.
func pauseClient(t *testing.T, partitions int32) (*kgo.Client, *metrics) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	m, err := newMetrics(nil, "pause", []string{"in"})
	if err != nil {
		t.Fatal(err)
	}
	return cl, m
}
