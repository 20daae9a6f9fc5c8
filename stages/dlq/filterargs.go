package dlq

import (
	"fmt"
	"strings"
	"time"
)

// FilterArgs is a Filter as an operator writes it: the flags of `sluice
// dlq inspect|redrive` or the fields of the console's dead-letter form.
type FilterArgs struct {
	// Reasons and Rules select records with any of these dlq.reason /
	// dlq.rule values. When ReasonsGiven (RulesGiven) is set and the list
	// is empty, they select the records without one: an empty --rule=
	// parses as an empty list, which would otherwise select every record,
	// a surprise for a redrive.
	Reasons, Rules           []string
	ReasonsGiven, RulesGiven bool
	// Since and Until bound the failure time; see ParseTime for the forms.
	Since, Until string
	// SourceTopic selects records that came from this topic.
	SourceTopic string
}

// Filter builds the Filter a describes, reading relative times against
// now. Errors name the field with prefix before it ("--" for flags, "" for
// form fields): "invalid --since: …".
func (a FilterArgs) Filter(now time.Time, prefix string) (Filter, error) {
	f := Filter{Reasons: a.Reasons, Rules: a.Rules, SourceTopic: a.SourceTopic}
	if a.ReasonsGiven && len(f.Reasons) == 0 {
		f.Reasons = []string{""}
	}
	if a.RulesGiven && len(f.Rules) == 0 {
		f.Rules = []string{""}
	}
	var err error
	if a.Since != "" {
		if f.Since, err = ParseTime(a.Since, now); err != nil {
			return f, fmt.Errorf("invalid %ssince: %w", prefix, err)
		}
	}
	if a.Until != "" {
		if f.Until, err = ParseTime(a.Until, now); err != nil {
			return f, fmt.Errorf("invalid %suntil: %w", prefix, err)
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return f, fmt.Errorf("%suntil %s is not after %ssince %s", prefix, f.Until.Format(time.RFC3339), prefix, f.Since.Format(time.RFC3339))
	}
	return f, nil
}

// ParseTime reads an RFC 3339 time, or a duration before now: "-1h" and
// "1h" both mean one hour ago. A zero duration is refused: as "a duration
// ago" it is now, which reads like the epoch or "from the start".
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither RFC 3339 (2024-05-01T09:00:00Z) nor a duration ago (-1h)", s)
	}
	if d == 0 {
		// "0" reads like the epoch or "from the start", but as a duration
		// ago it is now: replay --to-time 0 would skip every record.
		return time.Time{}, fmt.Errorf("%q is a zero duration, i.e. now: give RFC 3339 (2024-05-01T09:00:00Z) or a duration ago (-1h)", s)
	}
	if d > 0 {
		d = -d
	}
	return now.Add(d), nil
}
