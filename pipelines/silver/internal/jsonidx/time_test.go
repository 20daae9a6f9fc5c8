package jsonidx

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseRFC3339MatchesTimeParse(t *testing.T) {
	t.Parallel()
	inputs := []string{
		"2025-06-01T19:00:00Z", "2025-06-01T19:00:00.1Z", "2025-06-01T19:00:00.123456789Z", "2025-06-01T19:00:00.1234567891234Z",
		"2025-06-01T19:00:00+07:00", "2025-06-01T19:00:00-05:30", "2025-06-01T19:00:00+00:00", "2025-06-01T19:00:00-00:00",
		"2025-06-01T19:00:00+14:00", "2025-06-01T19:00:00+23:59", "2025-06-01T19:00:00+24:00", "2025-06-01T19:00:00+07:60",
		"2024-02-29T00:00:00Z", "2025-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2025-04-31T00:00:00Z",
		"2025-12-31T23:59:59Z", "2025-13-01T00:00:00Z", "2025-00-01T00:00:00Z", "2025-06-00T00:00:00Z", "2025-06-01T24:00:00Z",
		"2025-06-01T23:60:00Z", "2025-06-01T23:59:60Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z",
		"2025-06-01t19:00:00z", "2025-06-01T19:00:00z", "2025-06-01 19:00:00Z", "2025-06-01T19:00:00", "2025-06-01T19:00Z",
		"2025-06-01T19:00:00,5Z", "2025-06-01T19:00:00.Z", "2025-06-01T19:00:00.5", "2025-06-01T19:00:00+0700",
		"2025-6-01T19:00:00Z", "+025-06-01T19:00:00Z", "2025-06-01T9:00:00Z", "2025-06-01T19:00:00ZZ", "2025-06-01T19:00:00 Z",
		"2025-06-01T19:00:00.123+07:00", "2025-06-01T19:00:00.000000001-12:00", "", "hôm qua", "2025-06-01",
		"2025-06-01t19:00:00.5+07:00", "2025-06-01t19:00:00Z", "2025-06-01T19:00:00.123z", "2025-06-01t24:00:00z", "2025-06-01t19:00:00+24:00",
		"2025-06-01T19:00:00,123+07:00", "2025-06-01T19:0:00Z", "2025-06-01T19:00:0Z", "2025-06-01T19:00:00+7:00",
	}
	for i := 0; i < 2000; i++ { // pseudo-random well-formed times with every offset
		inputs = append(inputs, fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d.%0*dZ", 1990+i%40, 1+i%12, 1+i%31, i%24, i*7%60, i*13%60, 1+i%12, i*7919%1000000),
			fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d%c%02d:%02d", 1990+i%40, 1+i%12, 1+i*3%31, i*5%24, i*11%60, i*17%60, "+-"[i%2], i%25, []int{0, 30, 45, 59}[i%4]))
	}
	fast := 0
	for _, in := range inputs {
		got, ok := parseRFC3339([]byte(in))
		if ok {
			fast++
		}
		want, err := time.Parse(time.RFC3339Nano, in)
		if ok && (err != nil || !reflect.DeepEqual(got, want)) {
			t.Errorf("parseRFC3339(%q) = %v (%v), time.Parse = %v, %v", in, got, got.Location(), want, err)
		}
		// The field parser takes what RFC 3339's grammar takes ("T" and "Z"
		// in either case) and, of that, gives what time.Parse gives for the
		// upper-case spelling.
		rfc := rfc3339Grammar.MatchString(in)
		up := in
		if rfc {
			up = strings.ToUpper(in)
		}
		wantF, errF := time.Parse(time.RFC3339Nano, up)
		ft, ferr := ParseTime([]byte(strconv.Quote(in)))
		if (ferr == nil) != (rfc && errF == nil) || (ferr == nil && !reflect.DeepEqual(ft, wantF.Truncate(time.Microsecond))) {
			t.Errorf("ParseTime(%q) = %v, %v; RFC 3339 grammar %v, time.Parse(%q) = %v, %v", in, ft, ferr, rfc, up, wantF, errF)
		}
		if err != nil && ferr != nil && ferr.Error() != fmt.Sprintf("%q is not an RFC 3339 time: %v", in, err) {
			t.Errorf("ParseTime(%q) error %q", in, ferr)
		}
		if err == nil && ferr != nil && !strings.Contains(ferr.Error(), "is not an RFC 3339 time") {
			t.Errorf("ParseTime(%q) error %q", in, ferr)
		}
	}
	if fast < len(inputs)/2 {
		t.Errorf("fast path taken for %d of %d inputs", fast, len(inputs))
	}
}

// rfc3339Grammar is RFC 3339's date-time (§5.6) with "T" and "Z" in either
// case; the ranges of the date and time fields are left to time.Parse.
var rfc3339Grammar = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`)

func TestParseDateMatchesTimeParse(t *testing.T) {
	t.Parallel()
	inputs := []string{"2025-02-29", "2024-02-29", "1900-02-29", "2000-02-29", "0000-01-01", "9999-12-31", "2025-00-10", "2025-13-10",
		"2025-06-00", "2025-06-31", "2025-6-01", "2025-06-1", "+025-06-01", "-001-06-01", "2025/06/01", "2025-06-01 ", "20250601", ""}
	for d := time.Date(1999, 12, 25, 0, 0, 0, 0, time.UTC); d.Year() < 2001; d = d.AddDate(0, 0, 1) {
		inputs = append(inputs, d.Format(time.DateOnly))
	}
	for _, in := range inputs {
		got, ok := parseDate([]byte(in))
		want, err := time.Parse(time.DateOnly, in)
		if ok && (err != nil || !reflect.DeepEqual(got, want)) {
			t.Errorf("parseDate(%q) = %v, time.Parse = %v, %v", in, got, want, err)
		}
		if !ok && err == nil && len(in) == 10 && in[0] != '+' && in[0] != '-' {
			t.Errorf("parseDate(%q) missed a plain date", in)
		}
		if d, ok := ParseDate([]byte(in)); ok != (err == nil) || (ok && !reflect.DeepEqual(d, want)) {
			t.Errorf("ParseDate(%q) = %v, %v; time.Parse = %v, %v", in, d, ok, want, err)
		}
	}
}
