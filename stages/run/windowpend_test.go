package run_test

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// heavy is the output of TestWindowWriteKeepsNoBatchOutputs: a key and a
// payload, held by pointer so that the test can tell whether the runtime
// still references it.
type heavy struct {
	Key string
	Pad []byte
}

// heavySink is a run.Merger and run.Encoder of *heavy (the window holds
// the encodings, never the stage's outputs) whose Writes count, after a
// garbage collection, the stage's outputs still referenced.
type heavySink struct {
	mu      sync.Mutex
	made    []weak.Pointer[heavy] // every output the stage returned
	live    []int                 // per Write, the outputs still referenced
	written int
}

func (s *heavySink) stage(_ context.Context, m msg) ([]*heavy, error) {
	h := &heavy{Key: m.Key, Pad: make([]byte, 64<<10)}
	s.mu.Lock()
	s.made = append(s.made, weak.Make(h))
	s.mu.Unlock()
	return []*heavy{h}, nil
}

func (*heavySink) MergeKey(h *heavy) string    { return h.Key }
func (*heavySink) Merge(_, next *heavy) *heavy { return next }
func (*heavySink) AppendEncoded(dst []byte, h *heavy) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(h.Pad)))
	return append(dst, h.Key...)
}

func (*heavySink) Decode(b []byte) (*heavy, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("corrupt heavy")
	}
	return &heavy{Key: string(b[k:]), Pad: make([]byte, n)}, nil
}

func (s *heavySink) Write(_ context.Context, batch []*heavy) error {
	runtime.GC()
	runtime.GC()
	s.mu.Lock()
	defer s.mu.Unlock()
	live := 0
	for _, p := range s.made {
		if p.Value() != nil {
			live++
		}
	}
	s.live = append(s.live, live)
	s.written += len(batch)
	return nil
}

// A window holding encoded outputs references none of the stage's
// outputs once it encoded them: while the window is written (the batch
// that closed it included), the garbage collector can free them, as the
// memory budget released their batch before the write. A worker that
// kept its last batch's outputs until the write ended held a batch of
// outputs per partition outside the budget.
func TestWindowWriteKeepsNoBatchOutputs(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.BatchMaxRecords = 20
	cfg.Window = run.WindowConfig{MaxKeys: 10, MaxAge: time.Minute}
	const n = 40
	produce(t, k.Client(t), cfg.Topics[0], n, n, nil)
	sink := &heavySink{}
	_, stop := start(t, k, cfg, sink.stage, stages.Sink[*heavy](sink))
	stopWhenCommitted(t, k, cfg, n, time.Minute, stop)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.written != n || len(sink.made) != n {
		t.Fatalf("%d outputs written of %d made, want %d", sink.written, len(sink.made), n)
	}
	for i, live := range sink.live {
		if live != 0 {
			t.Errorf("write %d: %d of the stage's outputs still referenced while their window was written", i, live)
		}
	}
}
