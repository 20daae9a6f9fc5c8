package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/sysload"
)

// effect is one kind of effect a verifier counted: got against want, with
// the wanted ones missing (lost) and the ones present more than once or
// counted more than once (duplicated).
type effect struct {
	kind                 string
	got, want, lost, dup int64
	atMost               bool // want is a bound: got ≤ want is enough
}

func (e effect) ok() bool {
	return (e.got == e.want || e.atMost && e.got <= e.want) && e.lost == 0 && e.dup == 0
}

// result is one scenario's outcome.
type result struct {
	scenario       string
	sent           int
	doneAtFault    float64 // fraction of the work done when the fault began
	pendingAtFault int64   // units of work not done then (0: it hit nothing)
	unit           string  // of pendingAtFault
	effects        []effect
	notes          []string
	recovery       time.Duration // fault over → every effect there, every lag 0
	total          time.Duration
	err            error
}

func (r *result) add(e effect) { r.effects = append(r.effects, e) }

func (r *result) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r result) lost() (n int64) {
	for _, e := range r.effects {
		n += e.lost
	}
	return n
}

func (r result) duplicated() (n int64) {
	for _, e := range r.effects {
		n += e.dup
	}
	return n
}

func (r result) pass() bool {
	if r.err != nil || r.pendingAtFault <= 0 || len(r.effects) == 0 {
		return false
	}
	for _, e := range r.effects {
		if !e.ok() {
			return false
		}
	}
	return true
}

func renderReport(cfg *config, rs []result) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	w("## smap, ticks, trades and modules under faults (`make chaos`, bench/chaos)")
	w("")
	w("Run %s on %s (%d broker(s)), input scale %g; load average %s.", time.Now().UTC().Format(time.RFC3339), strings.Join(cfg.brokers, ","), len(cfg.brokers), cfg.scale, sysload.Averages())
	w("")
	w("| scenario | sent | done at the fault | pending then | effects got (want) | lost | duplicated | recovery s | total s | |")
	w("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |")
	for _, r := range rs {
		var eff []string
		for _, e := range r.effects {
			bound := ""
			if e.atMost {
				bound = "≤ "
			}
			eff = append(eff, fmt.Sprintf("%s %d (%s%d)", e.kind, e.got, bound, e.want))
		}
		verdict := "met"
		if !r.pass() {
			verdict = "**MISSED**"
		}
		if r.err != nil {
			verdict += " (" + r.err.Error() + ")"
		}
		w("| %s | %d | %.0f %% | %d %s | %s | %d | %d | %.1f | %.1f | %s |", r.scenario, r.sent, 100*r.doneAtFault, r.pendingAtFault, r.unit,
			strings.Join(eff, "; "), r.lost(), r.duplicated(), r.recovery.Seconds(), r.total.Seconds(), verdict)
	}
	w("")
	for _, r := range rs {
		for _, e := range r.effects {
			if !e.ok() {
				w("- %s: %s got %d, want %d: %d lost, %d duplicated.", r.scenario, e.kind, e.got, e.want, e.lost, e.dup)
			}
		}
		for _, n := range r.notes {
			w("- %s: %s", r.scenario, n)
		}
	}
	w("")
	w("Faults: kill = kill -9 of one of two `sluice run` members, started again 2 s later; redis, postgres, broker = the service (Kafka: every node) stopped for 5 s and started again; minio = the object store stopped for 5 s and until an object-store call failed (trades: once every trade is stored), then started again (trades:redis also calls the sim through the API across the restart: every answer equal to the reference, every error a clean 4xx/5xx within 10 s, the cache read and written again after it); leader = kill -9 of the broker leading partition 0 of the first input topic (3 nodes; started again after recovery). pending then = units of work (smap: items counted, plus one per project completed; ticks: source ticks in files, plus one per job completed; trades: trades stored plus digests written; modules: keys ready) whose effects were not there when the fault began (a fault that hits nothing fails). lost = effects the input implies that are missing; duplicated = effects present or counted more than once. recovery = from the end of the fault until every effect is there and every group's lag is 0.")
	return b.String()
}
