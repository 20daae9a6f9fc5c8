package trades

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// checkAt is exact: the timer's decision (actionAt, the predicate the
// timer applied to every window before it was indexed) is "nothing"
// strictly before checkAt and something at and after it, for any window
// state — pending revisions, partial emissions, publishing marks, last
// changes before, inside and after the grace, settle and horizon.
func TestCheckAtIsWhenTheTimerActs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	w, _ := ParseISOWeek("2025-W02")
	durs := []time.Duration{0, time.Nanosecond, time.Second, 30 * time.Second, time.Hour, 8 * 7 * 24 * time.Hour}
	acts := map[windowAction]int{}
	for range 20000 {
		cfg := DigestConfig{Grace: durs[rng.IntN(len(durs))], Settle: durs[rng.IntN(len(durs))],
			Horizon: durs[rng.IntN(len(durs))] + time.Duration(rng.IntN(3))*time.Hour}
		st := WindowState{Revision: rng.IntN(3), EmittedRevision: rng.IntN(3), EmittedPartial: rng.IntN(3) == 0,
			Publishing: rng.IntN(8) == 0}
		switch rng.IntN(4) {
		case 0: // never changed
		case 1:
			st.LastChange = w.Start.Add(time.Duration(rng.Int64N(int64(9 * 24 * time.Hour))))
		default:
			st.LastChange = w.End.Add(time.Duration(rng.Int64N(int64(3*time.Hour))) - time.Hour)
		}
		at := cfg.checkAt(w, st)
		probes := []time.Time{at, at.Add(-time.Nanosecond), at.Add(time.Nanosecond), at.Add(time.Hour), w.End,
			w.End.Add(cfg.Grace), st.LastChange.Add(cfg.Settle), w.End.Add(cfg.Horizon), w.End.Add(cfg.Horizon - 1)}
		for range 4 {
			probes = append(probes, w.Start.Add(time.Duration(rng.Int64N(int64(12*7*24*time.Hour)))))
		}
		for _, now := range probes {
			if at.IsZero() && now.Before(w.Start) {
				continue
			}
			act := cfg.actionAt(w, st, now)
			acts[act]++
			if (act != actNone) != !now.Before(at) {
				t.Fatalf("cfg %+v state %+v: at %v action %v, checkAt %v", cfg, st, now, act, at)
			}
		}
	}
	if acts[actNone] == 0 || acts[actEmit] == 0 || acts[actForget] == 0 {
		t.Fatalf("the cases did not reach every action: %v", acts)
	}
}

// popDue returns exactly the keys indexed at or before now, in key order,
// after any sequence of sets (new keys and new times for known ones) and
// removals, and forgets them.
func TestDueIndexPopsExactlyTheDue(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	x := newDueIndex(nil)
	ref := map[string]time.Time{}
	for step := range 20000 {
		key := fmt.Sprintf("W|u%03d|2025-01-06", rng.IntN(300))
		switch rng.IntN(10) {
		case 0:
			x.remove(key)
			delete(ref, key)
		case 1:
			now := base.Add(time.Duration(rng.IntN(1000)) * time.Second)
			var want []string
			for k, at := range ref {
				if !at.After(now) {
					want = append(want, k)
					delete(ref, k)
				}
			}
			slices.Sort(want)
			before := x.visited
			got := x.popDue(now)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: popDue(%v) = %v, want %v", step, now, got, want)
			}
			if x.visited-before != len(want) {
				t.Fatalf("step %d: visited %d windows for %d due", step, x.visited-before, len(want))
			}
		default:
			at := base.Add(time.Duration(rng.IntN(1000)) * time.Second)
			if rng.IntN(20) == 0 {
				at = time.Time{} // publishing: due at once
			}
			x.set(key, at)
			ref[key] = at
		}
		if x.len() != len(ref) {
			t.Fatalf("step %d: %d indexed, want %d", step, x.len(), len(ref))
		}
	}
}

// A firing visits the due windows only: with 100 000 windows indexed and 3
// due, it looks at 3.
func TestDueIndexFiringIsODue(t *testing.T) {
	cfg := DigestConfig{Grace: time.Hour, Settle: time.Second, Horizon: 8 * 7 * 24 * time.Hour}
	w, _ := ParseISOWeek("2025-W02")
	x := newDueIndex(nil)
	for i := range 100000 {
		// emitted, nothing pending: next looked at when forgotten
		x.set(fmt.Sprintf("W|u%06d|%s", i, w.StartDate()), cfg.checkAt(w, WindowState{Revision: 1, EmittedRevision: 1}))
	}
	now := w.End.Add(2 * time.Hour)
	for _, i := range []int{5, 50000, 99999} { // a late trade each: revision 2 pending
		x.set(fmt.Sprintf("W|u%06d|%s", i, w.StartDate()),
			cfg.checkAt(w, WindowState{Revision: 2, EmittedRevision: 1, LastChange: now.Add(-time.Minute)}))
	}
	got := x.popDue(now)
	want := []string{"W|u000005|2025-01-06", "W|u050000|2025-01-06", "W|u099999|2025-01-06"}
	if !slices.Equal(got, want) || x.visited != 3 {
		t.Fatalf("popDue = %v after visiting %d, want %v after 3", got, x.visited, want)
	}
	if x.len() != 100000-3 {
		t.Fatalf("%d indexed after the firing, want %d", x.len(), 100000-3)
	}
}
