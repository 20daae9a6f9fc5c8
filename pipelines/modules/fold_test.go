package modules

import (
	"testing"

	"github.com/sluicehq/sluice/stages/run"
)

// FoldState keeps the greatest token: the headers' when both records have
// them, else the states' own (epoch, version).
func TestFoldState(t *testing.T) {
	t.Parallel()
	s := func(epoch int32, version int64) State {
		return State{Ticker: "NVDA", Module: ModuleDarkPool, Status: StatusReady, Epoch: epoch, Version: version}
	}
	stamped := func(v State) run.Entry[State] {
		return run.Entry[State]{Key: v.Key(), Value: v, Token: v.Token(), Tokened: true}
	}
	bare := func(v State) run.Entry[State] { return run.Entry[State]{Key: v.Key(), Value: v} }
	cases := []struct {
		name      string
		cur, next run.Entry[State]
		replace   bool
	}{
		{"stamped zombie", stamped(s(5, 3)), stamped(s(2, 999)), false},
		{"stamped successor", stamped(s(2, 999)), stamped(s(5, 3)), true},
		{"unstamped zombie", stamped(s(5, 3)), bare(s(2, 999)), false},
		{"unstamped successor", bare(s(2, 999)), stamped(s(5, 3)), true},
		{"unstamped later version", bare(s(5, 3)), bare(s(5, 4)), true},
		{"tombstone", stamped(s(5, 3)), run.Entry[State]{Key: "NVDA:dark_pool", Deleted: true}, true},
	}
	for _, c := range cases {
		if got := FoldState(c.cur, c.next); got != c.replace {
			t.Errorf("%s: replace = %v, want %v", c.name, got, c.replace)
		}
	}
}
