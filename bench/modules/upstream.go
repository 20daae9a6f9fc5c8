package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pipelines/modules"
)

// upstream is the synthetic upstream both variants call: at most
// maxConcurrent calls at once (a call waits for a slot), each taking
// latency, or slow for a fraction slowFrac of the calls (chosen by a
// seeded generator). It counts calls in total and per key. It implements
// modules.ModuleSource and is safe for concurrent use.
type upstream struct {
	slots    chan struct{}
	latency  time.Duration
	slow     time.Duration
	slowFrac float64

	calls       atomic.Int64
	slowCalls   atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	lastEnd     atomic.Int64 // Unix nanoseconds at which the last call ended
	mu          sync.Mutex
	rng         *rand.Rand
	perKey      map[string]int
}

func newUpstream(maxConcurrent int, latency, slow time.Duration, slowFrac float64, seed uint64) *upstream {
	return &upstream{slots: make(chan struct{}, maxConcurrent), latency: latency, slow: slow, slowFrac: slowFrac,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), perKey: map[string]int{}}
}

// upstreamPayload is what a call returns: the time the data is of (when
// the call got its slot) and the call's number for the key.
type upstreamPayload struct {
	Ticker string    `json:"ticker"`
	Module string    `json:"module"`
	AsOf   time.Time `json:"as_of"`
	Call   int       `json:"call"`
}

// Fetch implements modules.ModuleSource.
func (u *upstream) Fetch(ctx context.Context, ticker, module string) (modules.Snapshot, error) {
	select {
	case u.slots <- struct{}{}:
	case <-ctx.Done():
		return modules.Snapshot{}, ctx.Err()
	}
	defer func() { <-u.slots }()
	for n, m := u.inFlight.Add(1), u.maxInFlight.Load(); n > m && !u.maxInFlight.CompareAndSwap(m, n); m = u.maxInFlight.Load() {
	}
	defer u.inFlight.Add(-1)
	defer func() { u.lastEnd.Store(time.Now().UnixNano()) }()
	asOf := time.Now().UTC()
	key := modules.Key(ticker, module)
	u.mu.Lock()
	u.perKey[key]++
	n := u.perKey[key]
	d := u.latency
	if u.slowFrac > 0 && u.rng.Float64() < u.slowFrac {
		d = u.slow
		u.slowCalls.Add(1)
	}
	u.mu.Unlock()
	u.calls.Add(1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return modules.Snapshot{}, ctx.Err()
	}
	p, err := json.Marshal(upstreamPayload{Ticker: ticker, Module: module, AsOf: asOf, Call: n})
	if err != nil {
		return modules.Snapshot{}, fmt.Errorf("upstream payload: %w", err)
	}
	return modules.Snapshot{Payload: p}, nil
}

// doneAfter returns how long after start the last call ended (0 when none did).
func (u *upstream) doneAfter(start time.Time) time.Duration {
	end := u.lastEnd.Load()
	if end == 0 {
		return 0
	}
	return time.Unix(0, end).Sub(start)
}

// duplicates returns the keys called more than once and the calls beyond
// the first of each key.
func (u *upstream) duplicates() (keys, extra int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, n := range u.perKey {
		if n > 1 {
			keys++
			extra += n - 1
		}
	}
	return keys, extra
}
