package dlq

import (
	"strings"
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"2024-05-01T09:00:00Z", time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC), true},
		{"2024-05-01T16:00:00+07:00", time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC), true},
		{"-1h", now.Add(-time.Hour), true},
		{"90m", now.Add(-90 * time.Minute), true},
		{"2024-05-01", time.Time{}, false},
		{"soon", time.Time{}, false},
		{"0", time.Time{}, false},
		{"0s", time.Time{}, false},
		{"-0h", time.Time{}, false},
	}
	for _, tc := range cases {
		got, err := ParseTime(tc.in, now)
		if (err == nil) != tc.ok || (tc.ok && !got.Equal(tc.want)) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// An empty but given reason or rule list selects the records without one;
// errors name the field with the caller's prefix.
func TestFilterArgs(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	f, err := FilterArgs{RulesGiven: true, Reasons: []string{"sanity_fail"}, Since: "-1h", SourceTopic: "bronze.records"}.Filter(now, "--")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Rules) != 1 || f.Rules[0] != "" || len(f.Reasons) != 1 || f.Reasons[0] != "sanity_fail" ||
		!f.Since.Equal(now.Add(-time.Hour)) || f.SourceTopic != "bronze.records" {
		t.Fatalf("Filter = %+v", f)
	}
	if f, _ := (FilterArgs{}).Filter(now, ""); f.Rules != nil || f.Reasons != nil {
		t.Fatalf("nothing given: %+v, want a filter matching everything", f)
	}
	for _, tc := range []struct {
		a      FilterArgs
		prefix string
		want   string
	}{
		{FilterArgs{Since: "soon"}, "--", "invalid --since: "},
		{FilterArgs{Until: "0"}, "", "invalid until: "},
		{FilterArgs{Since: "-1h", Until: "-2h"}, "", "until 2024-05-01T10:00:00Z is not after since 2024-05-01T11:00:00Z"},
	} {
		if _, err := tc.a.Filter(now, tc.prefix); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want prefix %q", tc.a, err, tc.want)
		}
	}
}
