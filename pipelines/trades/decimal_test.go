package trades

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestFixed8RoundsHalfEvenToEightDigits(t *testing.T) {
	cases := map[string]string{
		"2":                 `"2.00000000"`,
		"-1.5":              `"-1.50000000"`,
		"0.123456785":       `"0.12345678"`, // tie, 8 is even: down
		"0.123456775":       `"0.12345678"`, // tie, 7 is odd: up
		"0.1234567851":      `"0.12345679"`, // above the tie
		"-0.123456785":      `"-0.12345678"`,
		"-0.123456775":      `"-0.12345678"`,
		"-0.000000005":      `"0.00000000"`, // no negative zero
		"0.000000015":       `"0.00000002"`,
		"1e-9":              `"0.00000000"`,
		"12345678901234567": `"12345678901234567.00000000"`,
		"1.23e4":            `"12300.00000000"`,
	}
	for in, want := range cases {
		var f Fixed8
		if err := json.Unmarshal([]byte(`"`+in+`"`), &f); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		b, _ := json.Marshal(f)
		if string(b) != want {
			t.Errorf("Fixed8(%s) = %s, want %s", in, b, want)
		}
	}
}

func TestExactIsCanonical(t *testing.T) {
	cases := map[string]string{
		`"1.50"`:     `"1.5"`,
		`1e3`:        `"1000"`,
		`"0.000"`:    `"0"`,
		`"-0"`:       `"0"`,
		`"+2.5"`:     `"2.5"`,
		`".5"`:       `"0.5"`,
		`"5."`:       `"5"`,
		`0.00000001`: `"0.00000001"`,
		`"1E-20"`:    `"0.00000000000000000001"`,
	}
	for in, want := range cases {
		var e Exact
		if err := json.Unmarshal([]byte(in), &e); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		b, _ := json.Marshal(e)
		if string(b) != want {
			t.Errorf("Exact(%s) = %s, want %s", in, b, want)
		}
	}
}

func TestParseDecimalRefuses(t *testing.T) {
	for _, in := range []string{
		`"NaN"`, `"Inf"`, `"-Infinity"`, `"0x10"`, `" 1"`, `"1 "`, `"1,5"`, `""`, `"-"`, `"."`, `"1e"`,
		`true`, `null`, `[1]`, `{"v":1}`,
		`"1e31"`,                            // 32 integer digits
		`"1e-31"`,                           // 31 fractional digits
		`"` + strings.Repeat("9", 31) + `"`, // 31 integer digits
		`"` + strings.Repeat("1", 81) + `"`, // too long
		`"1e99999"`,
	} {
		if d, err := ParseDecimal(json.RawMessage(in)); err == nil {
			t.Errorf("ParseDecimal(%s) = %s, want an error", in, d)
		} else if len(err.Error()) > 200 {
			t.Errorf("ParseDecimal(%s): error of %d bytes", in, len(err.Error()))
		}
	}
	for _, in := range []string{`"` + strings.Repeat("9", 30) + `"`, `"1e-30"`, `"-1e29"`} {
		if _, err := ParseDecimal(json.RawMessage(in)); err != nil {
			t.Errorf("ParseDecimal(%s): %v", in, err)
		}
	}
}

func TestDecimalNullLeavesValue(t *testing.T) {
	v := struct {
		E Exact  `json:"e"`
		F Fixed8 `json:"f"`
	}{Exact{dec("1.5")}, Fixed8{dec("2")}}
	if err := json.Unmarshal([]byte(`{"e":null,"f":null}`), &v); err != nil || v.E.String() != "1.5" || v.F.String() != "2" {
		t.Errorf("after nulls: %s %s (%v)", v.E, v.F, err)
	}
	if err := json.Unmarshal([]byte(`{"e":"x"}`), &v); err == nil {
		t.Error("a non-number was accepted")
	}
}
