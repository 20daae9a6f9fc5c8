package run

import (
	"strings"
	"testing"
	"time"
)

// The StopAtEnd rule: stop when every pending partition reached its end;
// otherwise only after StopIdle without a record arriving, and not while
// records fetched are still being processed.
func TestEndWatchCheck(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC)
	p0, p1 := tp{"in", 0}, tp{"in", 1}
	w := &endWatch{ends: map[tp]int64{p0: 10, p1: 5}, idle: time.Minute, next: map[tp]int64{}, arrived: t0}
	for _, tc := range []struct {
		name string
		pos  map[tp]int64
		next map[tp]int64
		at   time.Duration
		want string // "" or a substring of the reason
	}{
		{"both at their end", map[tp]int64{p0: 10, p1: 7}, nil, 0, "reached their end"},
		{"one short, recent arrival", map[tp]int64{p0: 10, p1: 4}, nil, 59 * time.Second, ""},
		{"one unassigned, recent arrival", map[tp]int64{p0: 10}, nil, 59 * time.Second, ""},
		{"one unassigned, idle", map[tp]int64{p0: 10}, nil, time.Minute, "1 of 2 pending partition(s) short"},
		{"idle but records in hand", map[tp]int64{p0: 8}, map[tp]int64{p0: 10}, time.Hour, ""},
		{"idle, everything fetched processed", map[tp]int64{p0: 8}, map[tp]int64{p0: 8}, time.Hour, "2 of 2 pending"},
	} {
		w.next = map[tp]int64{}
		for k, v := range tc.next {
			w.next[k] = v
		}
		got := w.check(tc.pos, t0.Add(tc.at))
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: check = %q, want %q", tc.name, got, tc.want)
		}
	}
}
