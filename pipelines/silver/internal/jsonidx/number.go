package jsonidx

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Errors of [ParseInt].
var (
	ErrNotInteger = errors.New("not an integer")
	ErrIntRange   = errors.New("out of range for BIGINT")
)

// ParseFloat parses raw, a JSON number as Index delimited it, as the
// nearest float64 (as strconv.ParseFloat does). A value beyond float64's
// range is an error ("out of range for DOUBLE PRECISION"); one that
// underflows to a denormal or to zero is that value. A decimal of at most
// 15 digits without exponent is parsed without allocating.
func ParseFloat(raw []byte) (float64, error) {
	if f, ok := parseShortDecimal(raw); ok {
		return f, nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) && !math.IsInf(f, 0) {
			// Underflow to a denormal or zero is a representable value.
			return f, nil
		}
		if errors.Is(err, strconv.ErrRange) {
			return 0, errors.New("out of range for DOUBLE PRECISION")
		}
		return 0, fmt.Errorf("not a number: %w", err)
	}
	return f, nil
}

// parseShortDecimal is the fast path of ParseFloat for -?digits[.digits]
// with at most 15 digits: the mantissa and the power of ten are then exact
// float64 values, so their quotient is correctly rounded, i.e. the value
// strconv.ParseFloat returns.
func parseShortDecimal(b []byte) (float64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var mant uint64
	point := -1
	for i, c := range b {
		switch {
		case isDigit(c):
			mant = mant*10 + uint64(c-'0')
		case c == '.' && point < 0:
			point = i
		default:
			return 0, false
		}
	}
	f := float64(mant)
	if point >= 0 {
		if len(b) == 1 { // "." alone
			return 0, false
		}
		f /= pow10[len(b)-1-point]
	} else if len(b) > 15 {
		return 0, false
	}
	if neg {
		f = -f
	}
	return f, true
}

// pow10 holds the powers of ten that parseShortDecimal divides by (a
// constant table).
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// ParseInt parses raw, a JSON number as Index delimited it, whose value is
// an integer that fits an int64, whatever its spelling: "1000", "1e3",
// "1000.0" and "1.0e3" are all 1000. A value with a fraction ("1.5",
// "1e-1") is [ErrNotInteger], one beyond int64 [ErrIntRange]. A plain
// integer of at most 18 digits is parsed without allocating.
func ParseInt(raw []byte) (int64, error) {
	digits := raw
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return parseInteger(string(raw))
	}
	var n int64
	for _, c := range digits {
		if !isDigit(c) {
			return parseInteger(string(raw))
		}
		n = n*10 + int64(c-'0')
	}
	if raw[0] == '-' {
		n = -n
	}
	return n, nil
}

// parseInteger is ParseInt on a string, for every spelling. Exponents are
// handled without materialising huge numbers.
func parseInteger(raw string) (int64, error) {
	s := raw
	neg := false
	if strings.HasPrefix(s, "-") {
		neg = true
		s = s[1:]
	}
	mant, exp := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i+1:]
	}
	intPart, frac := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	// value = digits × 10^scale
	scale := -len(frac)
	if exp != "" {
		e, err := strconv.Atoi(exp)
		if err != nil {
			// An exponent beyond int range: zero stays zero, anything else
			// is either a non-integer (huge negative) or out of range.
			if digits == "" {
				return 0, nil
			}
			if strings.HasPrefix(exp, "-") {
				return 0, ErrNotInteger
			}
			return 0, ErrIntRange
		}
		scale += e
	}
	if digits == "" {
		return 0, nil
	}
	trimmed := strings.TrimRight(digits, "0")
	scale += len(digits) - len(trimmed)
	digits = trimmed
	if scale < 0 {
		return 0, ErrNotInteger
	}
	if len(digits)+scale > 19 {
		return 0, ErrIntRange
	}
	str := digits + strings.Repeat("0", scale)
	if neg {
		str = "-" + str
	}
	n, err := strconv.ParseInt(str, 10, 64)
	if err != nil {
		return 0, ErrIntRange
	}
	return n, nil
}
