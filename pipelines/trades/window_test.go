package trades

import (
	"fmt"
	"testing"
	"time"
)

func TestWeekOf(t *testing.T) {
	monday := time.Date(2025, 1, 6, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		at    time.Time
		start time.Time
	}{
		{monday, monday},
		{monday.Add(-time.Nanosecond), monday.AddDate(0, 0, -7)},                                // Sunday 23:59:59.999999999
		{monday.AddDate(0, 0, 7).Add(-time.Nanosecond), monday},                                 // the last instant of the week
		{time.Date(2025, 1, 6, 1, 0, 0, 0, time.FixedZone("", 7200)), monday.AddDate(0, 0, -7)}, // Sunday 23:00 UTC
		{time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC), time.Date(2024, 12, 30, 0, 0, 0, 0, time.UTC)},
	}
	for _, c := range cases {
		w := WeekOf(c.at)
		if !w.Start.Equal(c.start) || !w.End.Equal(c.start.AddDate(0, 0, 7)) || w.Start.Location() != time.UTC {
			t.Errorf("WeekOf(%v) = %v..%v, want start %v", c.at, w.Start, w.End, c.start)
		}
		if !w.Contains(c.at) {
			t.Errorf("WeekOf(%v) does not contain it", c.at)
		}
	}
	w := WeekOf(monday)
	if !w.Contains(w.Start) || w.Contains(w.End) {
		t.Error("a window holds its start and not its end")
	}
}

func TestParseISOWeek(t *testing.T) {
	ok := map[string]string{
		"2025-W02": "2025-01-06",
		"2025-W01": "2024-12-30",
		"2020-W53": "2020-12-28",
		"2026-W52": "2026-12-21",
	}
	for in, start := range ok {
		w, err := ParseISOWeek(in)
		if err != nil || w.StartDate() != start || w.End.Sub(w.Start) != 7*24*time.Hour {
			t.Errorf("ParseISOWeek(%s) = %s..%s, %v; want start %s", in, w.StartDate(), w.EndDate(), err, start)
		}
		if y, wk := w.Start.ISOWeek(); fmt.Sprintf("%d-W%02d", y, wk) != in {
			t.Errorf("%s starts in ISO week %d-W%02d", in, y, wk)
		}
	}
	for _, in := range []string{"2025-W53", "2025-W00", "2025-W2", "2025W02", "2025-w02", "", "2025-01-06"} {
		if w, err := ParseISOWeek(in); err == nil {
			t.Errorf("ParseISOWeek(%q) = %s, want an error", in, w.StartDate())
		}
	}
}

func TestWindowKeys(t *testing.T) {
	w, err := ParseISOWeek("2025-W02")
	if err != nil {
		t.Fatal(err)
	}
	if got := DigestObjectKey("u1", w); got != "digests/u1/2025-01-06-2025-01-13.json" {
		t.Errorf("object key %s", got)
	}
	if got := WindowStateKey("u1", w); got != "W|u1|2025-01-06" {
		t.Errorf("window key %s", got)
	}
	if got := ContributionsKey("u1", w); got != "C|u1|2025-01-06" {
		t.Errorf("contribution key %s", got)
	}
	if p := w.Period(); p.Start != "2025-01-06" || p.End != "2025-01-13" {
		t.Errorf("period %+v", p)
	}
	if s, err := WindowStarting("2025-01-06"); err != nil || s != w {
		t.Errorf("WindowStarting = %+v, %v", s, err)
	}
	for _, bad := range []string{"2025-01-07", "2025-1-6", ""} {
		if _, err := WindowStarting(bad); err == nil {
			t.Errorf("WindowStarting(%q) accepted", bad)
		}
	}
}
