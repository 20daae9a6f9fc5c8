package run_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
)

// A stage waiting on stages.Stopping lets go of its record when the runner
// shuts down: Run returns at once instead of after RevokeTimeout (20s);
// the stage's stages.ErrStopped, even on its last attempt, is neither
// dead-lettered nor committed; the records before it are committed; and
// the next member processes the record.
func TestStageStoppingEndsItsWait(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.Retry.MaxAttempts = 1 // any error but an abandon dead-letters at once
	cl, adm := k.Client(t), k.Admin(t)
	produce(t, cl, cfg.Topics[0], 5, 1, nil)
	waiting := make(chan struct{}, 1)
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		if m.Value != "v-2" {
			return []msg{m}, nil
		}
		waiting <- struct{}{}
		select {
		case <-stages.Stopping(ctx):
			return nil, fmt.Errorf("backoff abandoned: %w", stages.ErrStopped)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Hour):
			return []msg{m}, nil
		}
	}
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, stages.Sink[msg](sink))
	select {
	case <-waiting:
	case <-time.After(60 * time.Second):
		t.Fatal("the stage never reached v-2")
	}
	t0 := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Generous: the bound only tells a prompt stop from RevokeTimeout's 20s.
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("shutdown took %v while the stage waited on Stopping", d)
	}
	if got := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0]; got != 2 {
		t.Errorf("committed %d, want 2 (the records before the abandoned one)", got)
	}
	if dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted()); len(dlq) != 0 {
		t.Errorf("%d DLQ records, want none", len(dlq))
	}

	next := memsink.New[msg]()
	_, stop = start(t, k, cfg, passthrough, stages.Sink[msg](next))
	testkit.WaitFor(t, 30*time.Second, "the next member to process the rest", func() bool { return next.Len() == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := next.Items()[0].Value; got != "v-2" {
		t.Errorf("the next member started at %q, want v-2", got)
	}
}
