package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseScenarios(t *testing.T) {
	got, err := parseScenarios("smap, ticks:redis,trades:kill")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"smap:kill", "smap:redis", "smap:postgres", "smap:broker", "smap:minio", "ticks:redis", "trades:kill"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "nosuch", "nosuch:kill", "ticks:postgres", "smap:reboot"} {
		if got, err := parseScenarios(bad); err == nil {
			t.Errorf("%q: accepted as %v", bad, got)
		}
	}
	// The leader kill is every pipeline's when named, never a default.
	if got, err := parseScenarios("smap:leader,modules:leader"); err != nil || !slices.Equal(got, []string{"smap:leader", "modules:leader"}) {
		t.Errorf("leader: %v, %v", got, err)
	}
	// The default is every pipeline's faults, in priority order.
	def := defaultScenarios()
	if len(def) == 0 || def[0] != "smap:kill" {
		t.Fatalf("default scenarios %v", def)
	}
	if again, err := parseScenarios(strings.Join(def, ",")); err != nil || !slices.Equal(again, def) {
		t.Fatalf("the default list does not parse back: %v, %v", again, err)
	}
}

// A scenario passes only with work pending at the fault, every effect as
// many as wanted, and nothing lost or duplicated.
func TestResultPass(t *testing.T) {
	ok := effect{kind: "rows", got: 10, want: 10}
	cases := []struct {
		name string
		r    result
		want bool
	}{
		{"met", result{pendingAtFault: 5, effects: []effect{ok}}, true},
		{"nothing pending at the fault", result{effects: []effect{ok}}, false},
		{"no effect verified", result{pendingAtFault: 5}, false},
		{"an error", result{pendingAtFault: 5, effects: []effect{ok}, err: errors.New("x")}, false},
		{"lost", result{pendingAtFault: 5, effects: []effect{ok, {kind: "objects", got: 9, want: 10, lost: 1}}}, false},
		{"duplicated, counts equal", result{pendingAtFault: 5, effects: []effect{{kind: "counted", got: 10, want: 10, lost: 1, dup: 1}}}, false},
		{"a dead letter", result{pendingAtFault: 5, effects: []effect{ok, {kind: "dead letters", got: 1}}}, false},
	}
	for _, c := range cases {
		if got := c.r.pass(); got != c.want {
			t.Errorf("%s: pass %t, want %t", c.name, got, c.want)
		}
	}
	r := result{effects: []effect{{lost: 2, dup: 1}, {lost: 3}}}
	if r.lost() != 5 || r.duplicated() != 1 {
		t.Errorf("lost %d, duplicated %d, want 5, 1", r.lost(), r.duplicated())
	}
}

// The new faults parse: trades under redis and minio, smap and ticks under
// minio; modules writes no object.
func TestParseScenariosObjectStoreAndSim(t *testing.T) {
	got, err := parseScenarios("trades:redis,trades:minio,smap:minio,ticks:minio")
	if err != nil || !slices.Equal(got, []string{"trades:redis", "trades:minio", "smap:minio", "ticks:minio"}) {
		t.Fatalf("got %v, %v", got, err)
	}
	if got, err := parseScenarios("modules:minio"); err == nil {
		t.Errorf("modules:minio accepted as %v", got)
	}
}
