package trades

import "testing"

// The digest store's groups are the ones its Range calls read: a user's
// contribution sets and the windows; a prefix of several groups names none.
func TestDigestGroup(t *testing.T) {
	for key, want := range map[string]string{
		ContributionsKey("u1", week0): "C|u1|",
		"C|u1|":                       "C|u1|",
		"C|":                          "",
		"C|u1":                        "",
		"W|":                          "W|",
		"W|u1|2025-01-06":             "W|",
		"X|a":                         "",
	} {
		if got := digestGroup(key); got != want {
			t.Errorf("digestGroup(%q) = %q, want %q", key, got, want)
		}
	}
}
