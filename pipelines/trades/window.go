package trades

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// Window is a digest window: an ISO week from Monday 00:00 UTC (Start,
// inclusive) to the next Monday 00:00 UTC (End, exclusive).
type Window struct {
	Start time.Time
	End   time.Time
}

// WeekOf returns the ISO week holding t (in UTC).
func WeekOf(t time.Time) Window {
	day := utcDate(t)
	// Go's Weekday is 0 on Sunday; ISO weeks start on Monday.
	back := (int(day.Weekday()) + 6) % 7
	start := day.AddDate(0, 0, -back)
	return Window{Start: start, End: start.AddDate(0, 0, 7)}
}

var isoWeekText = regexp.MustCompile(`^([0-9]{4})-W([0-9]{2})$`)

// ParseISOWeek parses an ISO week as the CLI takes it ("2025-W02") into its
// window. Weeks 53 exist only in years that have them.
func ParseISOWeek(s string) (Window, error) {
	m := isoWeekText.FindStringSubmatch(s)
	if m == nil {
		return Window{}, fmt.Errorf("week %q is not YYYY-Www", clip(s))
	}
	year, _ := strconv.Atoi(m[1])
	week, _ := strconv.Atoi(m[2])
	// 4 January is always in week 1 of its ISO year.
	w := WeekOf(time.Date(year, time.January, 4, 0, 0, 0, 0, time.UTC))
	start := w.Start.AddDate(0, 0, 7*(week-1))
	if y, wk := start.ISOWeek(); week < 1 || y != year || wk != week {
		return Window{}, fmt.Errorf("week %q does not exist", s)
	}
	return Window{Start: start, End: start.AddDate(0, 0, 7)}, nil
}

// WindowStarting returns the window starting on the date periodStart
// (YYYY-MM-DD), which must be a Monday.
func WindowStarting(periodStart string) (Window, error) {
	t, err := time.Parse(time.DateOnly, periodStart)
	if err != nil {
		return Window{}, fmt.Errorf("period start %q is not YYYY-MM-DD", clip(periodStart))
	}
	if t.Weekday() != time.Monday {
		return Window{}, fmt.Errorf("period start %s is a %s, not a Monday", periodStart, t.Weekday())
	}
	return Window{Start: t, End: t.AddDate(0, 0, 7)}, nil
}

// Contains reports whether t is in [Start, End).
func (w Window) Contains(t time.Time) bool {
	return !t.Before(w.Start) && t.Before(w.End)
}

// StartDate is Start as YYYY-MM-DD.
func (w Window) StartDate() string { return w.Start.Format(time.DateOnly) }

// EndDate is End (exclusive) as YYYY-MM-DD.
func (w Window) EndDate() string { return w.End.Format(time.DateOnly) }

// Period is the window as the dates events and objects carry.
func (w Window) Period() Period { return Period{Start: w.StartDate(), End: w.EndDate()} }

// DigestObjectKey is the object-store key of a user's digest of w:
// digests/{user_id}/{start}-{end}.json (end exclusive), e.g.
// digests/u1/2025-01-06-2025-01-13.json. User ids never hold an e-mail
// (rule trades.user_id), so keys carry no PII.
func DigestObjectKey(userID string, w Window) string {
	return "digests/" + userID + "/" + w.StartDate() + "-" + w.EndDate() + ".json"
}

// Keys of the digest store (trades.digest.state, compacted): a window's
// bookkeeping and a trade's contribution.

// WindowStateKey is "W|{user_id}|{start}".
func WindowStateKey(userID string, w Window) string { return "W|" + userID + "|" + w.StartDate() }

// ContributionsKey is "C|{user_id}|{start}": the window's contributions,
// one per trade id.
func ContributionsKey(userID string, w Window) string { return "C|" + userID + "|" + w.StartDate() }
