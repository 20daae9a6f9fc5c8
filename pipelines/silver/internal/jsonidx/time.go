package jsonidx

import (
	"fmt"
	"time"
)

// ParseTime decodes raw, a JSON value that must be an RFC 3339 string, to
// a time truncated to microseconds (PostgreSQL's timestamptz precision).
//
// It takes exactly RFC 3339's date-time (§5.6): YYYY-MM-DD "T" hh:mm:ss, an
// optional "." and fraction digits, then "Z" or ±hh:mm with hours 00–23;
// "T" and "Z" may be lower case (§5.6, note). time.Parse is more lenient
// (a "," before the fraction, a one-digit hour, offsets such as +24:00 or
// +07:60), and those spellings are refused. A leap second (:60) is refused
// too, as time.Parse does: Go cannot represent it. The location is what
// time.Parse(time.RFC3339Nano, …) gives. A string that is not text is an
// error wrapping [ErrInvalidText].
func ParseTime(raw []byte) (time.Time, error) {
	if KindOf(raw) != String {
		return time.Time{}, fmt.Errorf("want an RFC 3339 string, got %s", Describe(raw))
	}
	b, err := StringBytes(raw)
	if err != nil {
		return time.Time{}, err
	}
	return ParseTimeText(b)
}

// ParseTimeText is ParseTime of a JSON string already decoded to text
// (by [StringBytes] or [Span.Text]): b is the string's value.
func ParseTimeText(b []byte) (time.Time, error) {
	if t, ok := parseRFC3339(b); ok {
		return t.Truncate(time.Microsecond), nil
	}
	return parseTimeSlow(b)
}

// parseTimeSlow is ParseTime for what parseRFC3339 does not take: the
// lower-case spellings of "T" and "Z", or an error.
func parseTimeSlow(b []byte) (time.Time, error) {
	if n := len(b); n > 10 && (b[10] == 't' || b[n-1] == 'z') {
		up := []byte(string(b)) // a copy: b may alias the record
		if up[10] == 't' {
			up[10] = 'T'
		}
		if up[n-1] == 'z' {
			up[n-1] = 'Z'
		}
		if t, ok := parseRFC3339(up); ok {
			return t.Truncate(time.Microsecond), nil
		}
	}
	s := string(b)
	if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time: %w", s, err)
	}
	return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time: want YYYY-MM-DDThh:mm:ss, an optional .fraction, then Z or ±hh:mm (two-digit fields, offset hours 00–23)", s)
}

// parseRFC3339 parses exactly RFC 3339's date-time with upper-case "T" and
// "Z" (see ParseTime) on bytes, allocating only the zone of an offset
// other than the local zone's. When it reports ok,
// time.Parse(time.RFC3339Nano, string(b)) returns the same Time (location
// included); it is also the fast path of ParseTime.
func parseRFC3339(b []byte) (time.Time, bool) {
	ok := true
	num := func(b []byte, min, max int) int {
		x := 0
		for _, c := range b {
			if c < '0' || '9' < c {
				ok = false
				return min
			}
			x = x*10 + int(c-'0')
		}
		if x < min || max < x {
			ok = false
			return min
		}
		return x
	}
	if len(b) < len("2006-01-02T15:04:05") {
		return time.Time{}, false
	}
	year := num(b[0:4], 0, 9999)
	month := num(b[5:7], 1, 12)
	day := num(b[8:10], 1, daysIn(time.Month(month), year))
	hour := num(b[11:13], 0, 23)
	minute := num(b[14:16], 0, 59)
	sec := num(b[17:19], 0, 59)
	if !ok || !(b[4] == '-' && b[7] == '-' && b[10] == 'T' && b[13] == ':' && b[16] == ':') {
		return time.Time{}, false
	}
	b = b[19:]
	nsec := 0
	if len(b) >= 2 && b[0] == '.' && isDigit(b[1]) {
		n := 2
		for ; n < len(b) && isDigit(b[n]); n++ {
		}
		// As time does: at most 9 digits count, the rest are ignored.
		digits := b[1:min(n, 10)]
		for _, c := range digits {
			nsec = nsec*10 + int(c-'0')
		}
		for k := len(digits); k < 9; k++ {
			nsec *= 10
		}
		b = b[n:]
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	if len(b) == 1 && b[0] == 'Z' {
		return t, true
	}
	if len(b) != len("-07:00") {
		return time.Time{}, false
	}
	hr := num(b[1:3], 0, 23)
	mm := num(b[4:6], 0, 59)
	if !ok || !((b[0] == '-' || b[0] == '+') && b[3] == ':') {
		return time.Time{}, false
	}
	offset := (hr*60 + mm) * 60
	if b[0] == '-' {
		offset = -offset
	}
	t = t.Add(-time.Duration(offset) * time.Second)
	// Like time.Parse: the local zone when it has this offset at t, else an
	// unnamed fixed zone.
	if _, off := t.In(time.Local).Zone(); off == offset {
		return t.In(time.Local), true
	}
	return t.In(time.FixedZone("", offset)), true
}

// ParseDate parses b as time.Parse(time.DateOnly, string(b)) does (a UTC
// midnight) and reports whether it is such a date. A plain YYYY-MM-DD date
// is parsed without allocating.
func ParseDate(b []byte) (time.Time, bool) {
	if d, ok := parseDate(b); ok {
		return d, true
	}
	d, err := time.Parse(time.DateOnly, string(b))
	return d, err == nil
}

// parseDate is the fast path of ParseDate: when it reports ok, time.Parse
// returns the same Time; when not, time.Parse must decide.
func parseDate(b []byte) (time.Time, bool) {
	if len(b) != len("2006-01-02") || b[4] != '-' || b[7] != '-' {
		return time.Time{}, false
	}
	for _, i := range [...]int{0, 1, 2, 3, 5, 6, 8, 9} {
		if !isDigit(b[i]) {
			return time.Time{}, false
		}
	}
	year := int(b[0]-'0')*1000 + int(b[1]-'0')*100 + int(b[2]-'0')*10 + int(b[3]-'0')
	month := int(b[5]-'0')*10 + int(b[6]-'0')
	day := int(b[8]-'0')*10 + int(b[9]-'0')
	if month < 1 || month > 12 || day < 1 || day > daysIn(time.Month(month), year) {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(month), day, 0, 0, 0, 0, time.UTC), true
}

// daysIn is the number of days of month m of year (as time counts them).
func daysIn(m time.Month, year int) int {
	switch m {
	case time.February:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}
