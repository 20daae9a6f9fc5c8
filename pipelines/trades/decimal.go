package trades

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/shopspring/decimal"
)

// Exact decimals. Quantities, prices, fees and P/L are
// github.com/shopspring/decimal values: addition, subtraction and
// multiplication are exact (an arbitrary-precision integer coefficient and a
// base-10 exponent, no context whose precision could round a running
// position), values are immutable and safe to share, and RoundBank rounds
// half-even. Only the fee split divides, with an explicit precision (see
// splitFee). The library's package-level settings (DivisionPrecision,
// MarshalJSONWithoutQuotes, TrimTrailingZeros …) are never read by this
// package: text is produced by StringFixed/StringFixedBank, which ignore
// them, and JSON by the Exact and Fixed8 types below.

// PnLPlaces is the number of fractional digits of P/L values on the wire.
const PnLPlaces = 8

// Bounds of a decimal accepted from a broker or a record: at most
// maxIntDigits digits before the point and maxFracDigits significant digits
// after it, and at most maxDecimalText characters of text. They keep a
// hostile value (1e999999) from costing memory or time downstream.
const (
	maxIntDigits   = 30
	maxFracDigits  = 30
	maxDecimalText = 80
)

var decimalText = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,4})?$`)

// errNotDecimal is returned (wrapped) for text that is not a decimal number.
var errNotDecimal = errors.New("not a decimal number")

// ParseDecimal parses a JSON number or a JSON string holding a decimal
// number ("12.5", "-3", "1e-3"); surrounding spaces, NaN, infinities, hex and
// values outside the bounds above are refused. The error never quotes more
// than 40 bytes of the input.
func ParseDecimal(raw json.RawMessage) (decimal.Decimal, error) {
	raw = bytes.TrimSpace(raw)
	text := string(raw)
	if len(raw) > 0 && raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return decimal.Decimal{}, fmt.Errorf("%w: %s", errNotDecimal, clip(string(raw)))
		}
	}
	return parseDecimalText(text)
}

func parseDecimalText(text string) (decimal.Decimal, error) {
	if len(text) > maxDecimalText || !decimalText.MatchString(text) {
		return decimal.Decimal{}, fmt.Errorf("%w: %q", errNotDecimal, clip(text))
	}
	d, err := decimal.NewFromString(text)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%w: %q", errNotDecimal, clip(text))
	}
	intDigits, fracDigits := digits(d)
	if intDigits > maxIntDigits || fracDigits > maxFracDigits {
		return decimal.Decimal{}, fmt.Errorf("decimal %q out of range (at most %d integer and %d fractional digits)",
			clip(text), maxIntDigits, maxFracDigits)
	}
	return d, nil
}

// digits returns how many digits d has before the point and how many
// significant digits after it (trailing zeros not counted).
func digits(d decimal.Decimal) (intDigits, fracDigits int) {
	s := exactString(d)
	s = strings.TrimPrefix(s, "-")
	i, f, _ := strings.Cut(s, ".")
	if i == "0" {
		i = ""
	}
	return len(i), len(f)
}

// exactString is the shortest plain (never scientific) text of d: no
// exponent, no trailing fractional zeros, "0" for zero. It is canonical: two
// equal decimals have the same text.
func exactString(d decimal.Decimal) string {
	places := int32(0)
	if e := d.Exponent(); e < 0 {
		places = -e
	}
	s := d.StringFixed(places)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// fixed8 is d rounded half-even to PnLPlaces fractional digits, with exactly
// that many digits ("-0.00000000" never occurs).
func fixed8(d decimal.Decimal) string {
	return d.StringFixedBank(PnLPlaces)
}

func clip(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// Exact is a decimal that travels as a JSON string with its exact value
// (canonical text: no exponent, no trailing zeros), for quantities, prices
// and fees. It unmarshals from a JSON string or number within the bounds
// of ParseDecimal; null leaves it unchanged.
type Exact struct{ decimal.Decimal }

// MarshalJSON implements json.Marshaler.
func (e Exact) MarshalJSON() ([]byte, error) {
	return json.Marshal(exactString(e.Decimal))
}

// UnmarshalJSON implements json.Unmarshaler.
func (e *Exact) UnmarshalJSON(b []byte) error {
	return unmarshalDecimal(b, &e.Decimal)
}

// Fixed8 is a P/L value: a JSON string with exactly PnLPlaces fractional
// digits, rounded half-even ("-12.34567890"). It unmarshals from a JSON
// string or number within the bounds of ParseDecimal, keeping the value it
// reads (no rounding on input); null leaves it unchanged.
type Fixed8 struct{ decimal.Decimal }

// MarshalJSON implements json.Marshaler.
func (f Fixed8) MarshalJSON() ([]byte, error) {
	return json.Marshal(fixed8(f.Decimal))
}

// UnmarshalJSON implements json.Unmarshaler.
func (f *Fixed8) UnmarshalJSON(b []byte) error {
	return unmarshalDecimal(b, &f.Decimal)
}

// unmarshalDecimal sets *d to the JSON string or number b, parsed by
// ParseDecimal. A JSON null leaves *d unchanged, as encoding/json does; so
// does an error.
func unmarshalDecimal(b []byte, d *decimal.Decimal) error {
	if string(b) == "null" {
		return nil
	}
	v, err := ParseDecimal(b)
	if err != nil {
		return err
	}
	*d = v
	return nil
}
