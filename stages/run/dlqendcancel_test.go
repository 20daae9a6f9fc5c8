package run_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
)

// A stop that cancels the commit under way while its EndTxn is in flight
// leaves exactly one dead letter when the broker commits that transaction
// anyway: the member, which saw only its context end, learns from the
// group's offsets that the transaction committed, instead of committing
// its dead letters a second time in the final commit. With
// failOffsetFetch, the first read of the group's offsets after the failed
// end fails too: the outcome stays unknown, and the final commit reads
// the offsets again before producing anything.
//
// The broker (kfake) holds the first committing EndTxn, and with it every
// later request, until the member has been stopped (kgo fails a cancelled
// request at once and drops its late answer); then it commits it.
func TestDLQStopDuringCommitEndKeepsOneDeadLetter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		failOffsetFetch bool
	}{{"outcome read at once", false}, {"outcome read at the next commit", true}} {
		t.Run(tc.name, func(t *testing.T) {
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
			var held, fetchFailed atomic.Bool
			k.Fake().ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
				k.Fake().KeepControl()
				if !req.(*kmsg.EndTxnRequest).Commit || held.Swap(true) {
					return nil, nil, false
				}
				close(inEnd)
				select { // blocks the whole broker: nothing overtakes this EndTxn
				case <-release:
				case <-time.After(20 * time.Second):
				}
				return nil, nil, false
			})
			k.Fake().ControlKey(int16(kmsg.OffsetFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
				k.Fake().KeepControl()
				if !tc.failOffsetFetch || !held.Load() || fetchFailed.Swap(true) {
					return nil, nil, false
				}
				return offsetFetchRefusal(req.(*kmsg.OffsetFetchRequest)), nil, true
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
			if tc.failOffsetFetch && !fetchFailed.Load() {
				t.Fatal("no read of the group's offsets was refused")
			}
			checkOnePerPoison(t, k, cfg.DLQTopic, recs)
			if got := testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])[0]; got != 3 {
				t.Errorf("committed offset %d, want 3", got)
			}
		})
	}
}

// offsetFetchRefusal answers req with GROUP_AUTHORIZATION_FAILED for every
// group (a non-retriable error: the reader fails at once).
func offsetFetchRefusal(req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
	for _, g := range req.Groups {
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group = g.Group
		rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}
