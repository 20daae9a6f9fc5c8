package jsonidx

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// Kind is the JSON type of a value.
type Kind byte

// The JSON types; Invalid is the Kind of what is not a JSON value.
const (
	Invalid Kind = iota
	Null
	Bool
	Number
	String
	Array
	Object
)

// String returns the name of k as error messages say it: "null",
// "boolean", "number", "string", "array", "object" or "invalid JSON".
func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case Bool:
		return "boolean"
	case Number:
		return "number"
	case String:
		return "string"
	case Array:
		return "array"
	case Object:
		return "object"
	}
	return "invalid JSON"
}

// KindOf returns the JSON type of raw, which must be one syntactically
// valid JSON value (as Index located it), from its first byte.
func KindOf(raw []byte) Kind {
	if len(raw) == 0 || raw[0] <= ' ' {
		return kindOfSpaced(raw)
	}
	return firstByteKinds[raw[0]] // the common case: no leading whitespace
}

// kindOfSpaced is KindOf for a value that may start with whitespace (kept
// out of line so that KindOf inlines).
//
//go:noinline
func kindOfSpaced(raw []byte) Kind {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return Invalid
	}
	return firstByteKinds[raw[0]]
}

// firstByteKinds is the JSON type of a value by its first byte (a constant
// table).
var firstByteKinds = [256]Kind{
	'n': Null, 't': Bool, 'f': Bool, '"': String, '[': Array, '{': Object,
	'-': Number, '0': Number, '1': Number, '2': Number, '3': Number, '4': Number,
	'5': Number, '6': Number, '7': Number, '8': Number, '9': Number,
}

// Present returns raw and whether it is a value other than JSON null. raw
// is a value as Index located it (no surrounding whitespace), or nil for
// an absent member, which is not present either.
func Present(raw []byte) ([]byte, bool) {
	if len(raw) == 0 || raw[0] == 'n' {
		return nil, false
	}
	return raw, true
}

// Describe renders a JSON value for an error message: its type and an
// excerpt of at most 64 bytes, e.g. `number 12.5`.
func Describe(raw []byte) string {
	const max = 64
	s := string(bytes.TrimSpace(raw))
	if len(s) > max {
		s = s[:max] + "…"
	}
	return KindOf(raw).String() + " " + s
}

// ErrInvalidText is wrapped by the error of a JSON string that is not
// text: invalid UTF-8, or an escaped half of a UTF-16 surrogate pair
// without its other half.
var ErrInvalidText = errors.New("not valid UTF-8 text")

// DecodeString decodes raw, a JSON string as Index delimited it (so it
// holds no raw control characters). A string without escapes that is valid
// UTF-8 (the common case) is converted without reflection. A string that
// is not text is an error wrapping [ErrInvalidText], where encoding/json
// would put U+FFFD in place of what it cannot decode.
func DecodeString(raw []byte) (string, error) {
	if inner, ok := plainString(raw); ok {
		return string(inner), nil
	}
	if len(raw) >= 2 {
		if err := checkText(raw[1 : len(raw)-1]); err != nil {
			return "", err
		}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}

// StringBytes decodes a JSON string like [DecodeString] but returns its
// bytes: for a string without escapes, a sub-slice of raw without
// allocating, which must be neither modified nor retained (copy it into a
// string to keep it).
func StringBytes(raw []byte) ([]byte, error) {
	if inner, ok := plainString(raw); ok {
		return inner, nil
	}
	s, err := DecodeString(raw)
	if err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// plainString returns the bytes between the quotes of the raw JSON string
// raw when they are already its decoded value: no escapes, valid UTF-8.
func plainString(raw []byte) ([]byte, bool) {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		inner := raw[1 : len(raw)-1]
		if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
			return inner, true
		}
	}
	return nil, false
}

// checkText reports whether inner, the text between the quotes of a JSON
// string as the scanner delimited it (escapes well formed), decodes to
// Unicode text: valid UTF-8, and every \uD800–\uDBFF escape directly
// followed by a \uDC00–\uDFFF one (a surrogate pair), no other
// \uD800–\uDFFF escape. Text that is not Unicode has no faithful decoded
// form: a UTF-8 consumer (PostgreSQL text, say) cannot hold it as sent.
func checkText(inner []byte) error {
	if !utf8.Valid(inner) {
		return fmt.Errorf("%w: invalid UTF-8", ErrInvalidText)
	}
	for i := 0; i < len(inner); i++ {
		if inner[i] != '\\' {
			continue
		}
		i++
		if inner[i] != 'u' {
			continue
		}
		r := hex4(inner[i+1 : i+5])
		i += 4
		switch {
		case 0xD800 <= r && r < 0xDC00:
			if i+6 < len(inner) && inner[i+1] == '\\' && inner[i+2] == 'u' {
				if lo := hex4(inner[i+3 : i+7]); 0xDC00 <= lo && lo < 0xE000 {
					i += 6
					continue
				}
			}
			return fmt.Errorf("%w: \\u%04X is half of a surrogate pair", ErrInvalidText, r)
		case 0xDC00 <= r && r < 0xE000:
			return fmt.Errorf("%w: \\u%04X is half of a surrogate pair", ErrInvalidText, r)
		}
	}
	return nil
}

// hex4 is the value of four hexadecimal digits.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// RuneCount is utf8.RuneCount for valid UTF-8 (which a decoded JSON
// string is): the number of bytes that do not continue a multi-byte
// sequence, with the continuation bytes (10xxxxxx) counted eight at a
// time.
func RuneCount(b []byte) int {
	const hi = 0x8080808080808080
	n := len(b)
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		n -= bits.OnesCount64(x &^ (x << 1) & hi)
		b = b[8:]
	}
	for _, c := range b {
		if c&0xC0 == 0x80 {
			n--
		}
	}
	return n
}
