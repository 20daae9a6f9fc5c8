package main

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"
)

// The workload has per requests of each key, all due within the window,
// in order, and the same seed gives the same workload.
func TestSchedule(t *testing.T) {
	t.Parallel()
	a := schedule(50, 20, 2*time.Second, 7)
	if len(a) != 1000 {
		t.Fatalf("%d arrivals", len(a))
	}
	per := map[int]int{}
	for i, x := range a {
		per[x.key]++
		if x.at < 0 || x.at >= 2*time.Second || (i > 0 && x.at < a[i-1].at) {
			t.Fatalf("arrival %d at %s (previous %s)", i, x.at, a[max(0, i-1)].at)
		}
	}
	for k := range 50 {
		if per[k] != 20 {
			t.Errorf("key %d: %d requests", k, per[k])
		}
	}
	b := schedule(50, 20, 2*time.Second, 7)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, arrival %d differs: %v %v", i, a[i], b[i])
		}
	}
	seen := map[string]bool{}
	for k := range 500 {
		seen[benchTicker(k)] = true
	}
	if len(seen) != 500 {
		t.Errorf("%d distinct tickers for 500 keys", len(seen))
	}
}

// The upstream never runs more calls at once than its slots, counts every
// call per key, and makes the asked fraction slow.
func TestUpstream(t *testing.T) {
	t.Parallel()
	up := newUpstream(3, time.Millisecond, 2*time.Millisecond, 0.5, 1)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			snap, err := up.Fetch(context.Background(), benchTicker(i%10), benchModule)
			var p upstreamPayload
			if err != nil || json.Unmarshal(snap.Payload, &p) != nil || p.AsOf.IsZero() || p.Call < 1 {
				t.Errorf("fetch: %v %s", err, snap.Payload)
			}
		})
	}
	wg.Wait()
	if up.calls.Load() != 40 || up.maxInFlight.Load() > 3 || up.maxInFlight.Load() < 1 {
		t.Errorf("calls %d, max in flight %d (slots 3)", up.calls.Load(), up.maxInFlight.Load())
	}
	if keys, extra := up.duplicates(); keys != 10 || extra != 30 {
		t.Errorf("duplicates: %d keys, %d extra calls; want 10, 30", keys, extra)
	}
	if s := up.slowCalls.Load(); s == 0 || s == 40 {
		t.Errorf("%d slow calls of 40 at fraction 0.5", s)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	if p := percentile(ds, 0.99); p != 99 {
		t.Errorf("p99 = %d", p)
	}
	if p := percentile(ds, 0.5); p != 50 {
		t.Errorf("p50 = %d", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("empty: %d", p)
	}
}
