package jsonidx

import (
	"math"
	"strconv"
	"testing"
)

func TestParseInteger(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want int64
		err  error
	}{
		{"0", 0, nil}, {"-0", 0, nil}, {"0.000", 0, nil}, {"0e-999999999999", 0, nil},
		{"7", 7, nil}, {"-7", -7, nil}, {"1e3", 1000, nil}, {"1E3", 1000, nil}, {"1e+3", 1000, nil},
		{"12.50e1", 125, nil}, {"1000.0", 1000, nil}, {"100e-2", 1, nil},
		{"1.5", 0, ErrNotInteger}, {"1e-1", 0, ErrNotInteger}, {"1e-99999999999999999999", 0, ErrNotInteger},
		{"9223372036854775807", 9223372036854775807, nil}, {"-9223372036854775808", -9223372036854775808, nil},
		{"9223372036854775808", 0, ErrIntRange}, {"1e19", 0, ErrIntRange}, {"1e99999999999999999999", 0, ErrIntRange},
		{"00012", 12, nil},
	}
	for _, tc := range cases {
		got, err := parseInteger(tc.in)
		if err != tc.err || got != tc.want {
			t.Errorf("parseInteger(%q) = %d, %v; want %d, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
func TestParseShortDecimalMatchesStrconv(t *testing.T) {
	t.Parallel()
	inputs := []string{"0", "-0", "0.0", "-0.000", "1", "-1", "10.25", "0.1", "0.3", "123456789012345", "1234567890123456",
		"12345678901234.5", "1234567890123.45", "0.000000000000001", "0.0000000000000001", "99999999999999.9", "1.", ".5", ".", "-", "", "1e3", "1.5e2", "--1", "1.2.3", "00012.50"}
	x := uint64(1)
	for i := 0; i < 100000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		digits := strconv.FormatUint(x>>(x%40), 10)
		digits = digits[:1+int(x>>7)%min(len(digits), 17)]
		if p := int(x>>13) % (len(digits) + 1); p < len(digits) {
			digits = digits[:p] + "." + digits[p:]
			if p == 0 {
				digits = "0" + digits
			}
		}
		if x>>20&1 == 1 {
			digits = "-" + digits
		}
		inputs = append(inputs, digits)
	}
	fast := 0
	for _, in := range inputs {
		got, ok := parseShortDecimal([]byte(in))
		if !ok {
			continue
		}
		fast++
		want, err := strconv.ParseFloat(in, 64)
		if err != nil || math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("parseShortDecimal(%q) = %v, strconv = %v, %v", in, got, want, err)
		}
	}
	if fast < len(inputs)/2 {
		t.Errorf("fast path taken for %d of %d inputs", fast, len(inputs))
	}
	if _, ok := parseShortDecimal([]byte("25512.5")); !ok {
		t.Error("fast path not taken for a plain price")
	}
}
func TestParseIntMatchesParseInteger(t *testing.T) {
	t.Parallel()
	inputs := []string{"0", "-0", "7", "-7", "100", "123456789012345678", "-123456789012345678", "1234567890123456789",
		"9223372036854775807", "-9223372036854775808", "9223372036854775808", "1e3", "1.5", "1000.0", "00012", "-", ""}
	for _, in := range inputs {
		got, err := ParseInt([]byte(in))
		want, werr := parseInteger(in)
		if got != want || err != werr {
			t.Errorf("ParseInt(%q) = %d, %v; parseInteger %d, %v", in, got, err, want, werr)
		}
	}
}

// TestParseFloatRange: beyond float64's range is an error, underflow is
// the value it rounds to.
func TestParseFloatRange(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{"1e-400": 0, "-1e-400": math.Copysign(0, -1), "4.9e-324": 5e-324,
		"1.7976931348623157e308": math.MaxFloat64, "0.1": 0.1, "-0": math.Copysign(0, -1), "123456789012345678901234567890": 1.2345678901234568e29} {
		got, err := ParseFloat([]byte(in))
		if err != nil || math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("ParseFloat(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"1e309", "-1e309", "1.8e308"} {
		if got, err := ParseFloat([]byte(in)); err == nil || err.Error() != "out of range for DOUBLE PRECISION" {
			t.Errorf("ParseFloat(%s) = %v, %v; want out of range", in, got, err)
		}
	}
}
