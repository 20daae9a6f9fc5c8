package run_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
)

// A stop that cancels the commit under way while its EndTxn is in flight
// leaves exactly one dead letter when the broker commits that transaction
// anyway: the member, which saw only its context end, learns from the
// group's offsets that the transaction committed, instead of committing
// its dead letters a second time in the final commit.
//
// The broker (kfake) holds the first committing EndTxn, and with it every
// later request, until the member has been stopped (kgo fails a cancelled
// request at once and drops its late answer); then it commits it.
func TestDLQStopDuringCommitEndKeepsOneDeadLetter(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.CommitInterval = time.Hour // only the dead letter's kick commits
	recs := produce(t, k.Client(t), cfg.Topics[0], 3, 1, func(i int) string {
		if i == 1 {
			return "poison-1"
		}
		return "v"
	})
	inEnd, release := make(chan struct{}), make(chan struct{})
	held := false
	k.Fake().ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		if !req.(*kmsg.EndTxnRequest).Commit || held {
			return nil, nil, false
		}
		held = true
		close(inEnd)
		select { // blocks the whole broker: nothing overtakes this EndTxn
		case <-release:
		case <-time.After(20 * time.Second):
		}
		return nil, nil, false
	})
	_, stop := start(t, k, cfg, poisonStage, memsink.New[msg]())
	select {
	case <-inEnd:
	case <-time.After(30 * time.Second):
		t.Fatal("no committing EndTxn within 30s")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(500 * time.Millisecond) // the stop cancels the commit: its EndTxn fails in the member
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	checkOnePerPoison(t, k, cfg.DLQTopic, recs)
	if got := testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])[0]; got != 3 {
		t.Errorf("committed offset %d, want 3", got)
	}
}
