package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// arrival is one request of the workload: key number key, due at offset
// at from the start.
type arrival struct {
	at  time.Duration
	key int
}

// schedule returns keys × per arrivals, each at a uniformly random offset
// in [0, window), sorted by offset; the same seed gives the same workload.
func schedule(keys, per int, window time.Duration, seed uint64) []arrival {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	out := make([]arrival, 0, keys*per)
	for k := range keys {
		for range per {
			out = append(out, arrival{at: time.Duration(rng.Int64N(int64(window))), key: k})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// benchTicker is the ticker of key number k: letters only, so that every
// key passes the ticker rule (^[A-Z][A-Z0-9.-]{0,9}$).
func benchTicker(k int) string {
	b := []byte("B")
	for i := 0; i < 4; i++ {
		b = append(b, byte('A'+k%26))
		k /= 26
	}
	return string(b)
}

// benchModule is the module every key refreshes: options_flow (freshness
// threshold 15 min, data TTL 1 h), so that a key stays fresh for the run.
const benchModule = "options_flow"

// percentile returns the p-th percentile (0 < p ≤ 1) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
