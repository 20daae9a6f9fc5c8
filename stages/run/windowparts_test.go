package run_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// overlapSink is an encodedBlobSink whose Writes wait until two of them
// are under way at once (overlap), or their context ends; it records the
// most Writes it saw under way together.
type overlapSink struct {
	encodedBlobSink
	mu       sync.Mutex
	inflight int
	peak     int
	overlap  chan struct{}
	once     sync.Once
}

func (s *overlapSink) Write(ctx context.Context, batch []blob) error {
	s.mu.Lock()
	s.inflight++
	s.peak = max(s.peak, s.inflight)
	if s.inflight >= 2 {
		s.once.Do(func() { close(s.overlap) })
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}()
	select {
	case <-s.overlap:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.encodedBlobSink.Write(ctx, batch)
}

// The parts of one encoded window (one partition) are written two at a
// time, not one after the other: the sink sees two Writes of the same
// window under way together, never more, and every key still lands with
// the merge of all its records, committed. Written one part after the
// other, the first Write would wait for a second one that never comes.
func TestEncodedWindowPartsWrittenConcurrently(t *testing.T) {
	t.Parallel()
	k, cfg, want := partsBacklog(t)
	const n, keys = partsN, partsKeys
	sink := &overlapSink{encodedBlobSink: encodedBlobSink{newBlobSink(0)}, overlap: make(chan struct{})}
	_, stop := start(t, k, cfg, toBlob, stages.Sink[blob](sink), run.WithBudget(run.NewBudget(64<<20)))
	select {
	case <-sink.overlap:
	case <-time.After(time.Minute):
		_ = stop()
		t.Fatal("no two Writes of the window's parts were under way at once")
	}
	stopWhenCommitted(t, k, cfg, n, time.Minute, stop)
	sink.mu.Lock()
	peak := sink.peak
	sink.mu.Unlock()
	if peak != 2 {
		t.Errorf("at most %d Writes under way at once, want 2 (partWriters)", peak)
	}
	s := sink.blobSink
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.writes) < 3 {
		t.Errorf("%d writes (%v) of %d keys: the window was not written in parts", len(s.writes), s.writes, keys)
	}
	for key, w := range want {
		if got := s.state[key]; got != w {
			t.Errorf("key %s: count %d hash %x, want count %d hash %x", key, got.count, got.last, w.count, w.last)
		}
	}
}
