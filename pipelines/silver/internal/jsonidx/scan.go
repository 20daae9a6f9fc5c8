package jsonidx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/bits"
)

// maxDepth bounds nesting like encoding/json does.
const maxDepth = 10000

// maxIndexed is the largest input whose offsets fit a Span.
const maxIndexed = math.MaxUint32

// ErrNotObject is wrapped by the error of [Index] for valid JSON that is
// not an object.
var ErrNotObject = errors.New("not a JSON object")

// A Span locates a member's value in the object that [Index] indexed: the
// value's JSON text is the object's bytes [off, end), from its '{'. The
// zero Span means absent (a value never starts at the object's first
// byte). plain records that the value is a string whose bytes between the
// quotes are its decoded value (see [Span.Text]).
type Span struct {
	off, end uint32
	plain    bool
}

// Value returns the JSON text of the value s locates in obj, the object
// (from its '{') that s was recorded for, and whether it is present.
func (s Span) Value(obj []byte) ([]byte, bool) {
	if s.end == 0 {
		return nil, false
	}
	return obj[s.off:s.end], true
}

// Text returns the decoded value of the JSON string s locates in obj (as
// for Value) when Index found it plain: without escapes and valid UTF-8,
// so that its value is the bytes between its quotes, a sub-slice of obj
// (what [StringBytes] returns, found without reading them again). It
// reports false for an absent member, a value that is not a string and a
// string that holds an escape or bytes that are not UTF-8: [StringBytes]
// decides those.
func (s Span) Text(obj []byte) ([]byte, bool) {
	if !s.plain {
		return nil, false
	}
	return obj[s.off+1 : s.end-1], true
}

// Nested asks [Index] to index, in the same pass, the object value of one
// member of the object it indexes.
type Nested struct {
	// Member is the index, in the outer object's Names, of the member whose
	// value is indexed when it is an object.
	Member int
	// Names are the member names recorded in that object, into Spans
	// (len(Spans) ≥ Names.Len()), as offsets from that object's '{'. The
	// spans must be zero (absent) when Index is called.
	Names *Names
	Spans []Span
	// Size is set to the length of the indexed object; it must be 0 when
	// Index is called and stays 0 when there is no such object (an object
	// is at least 2 bytes long). Of duplicate members the last whose value
	// is an object is the one described: Spans are reset before each one
	// after the first is indexed.
	Size int
}

// Index validates that b is exactly one JSON object (whitespace around it
// allowed) and, for each member of it whose name is in names, sets
// spans[k] (k the name's index; len(spans) ≥ names.Len()) to the span of
// the value of the last member of that name; the other spans are left as
// they are. It returns the offset in b of the object's '{', the base of
// the spans. names may be nil (record nothing, only validate); nested, when
// not nil, has one member's object value indexed too. For valid JSON,
// Index allocates nothing unless a member name holds an escape; it
// neither keeps nor modifies b.
func Index(b []byte, names *Names, spans []Span, nested *Nested) (int, error) {
	if len(b) > maxIndexed {
		return 0, errors.New("JSON value larger than 4 GiB")
	}
	s := scanner{b: b}
	i := s.ws(0)
	if i >= len(b) {
		return 0, errors.New("unexpected end of JSON input")
	}
	if b[i] != '{' {
		// Say "not an object" only for otherwise valid JSON.
		end, err := s.value(i)
		if err != nil {
			return 0, err
		}
		if end = s.ws(end); end < len(b) {
			return 0, s.errAt(end, "after top-level value")
		}
		return 0, fmt.Errorf("%w: %s", ErrNotObject, KindOf(b[i:]))
	}
	end, err := s.indexed(i, names, spans, nested)
	if err != nil {
		return 0, err
	}
	if end = s.ws(end); end < len(b) {
		return 0, s.errAt(end, "after top-level value")
	}
	return i, nil
}

// Elements iterates over the elements of raw, one JSON array as [Index]
// delimited it (a value it located), yielding each element's JSON text
// without surrounding whitespace. A syntax error is yielded last.
func Elements(raw []byte) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		s := scanner{b: raw}
		i := s.ws(1)
		if i < len(raw) && raw[i] == ']' {
			return
		}
		for {
			start := i
			end, err := s.value(i)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(raw[start:end], nil) {
				return
			}
			i = s.ws(end)
			if i >= len(raw) {
				yield(nil, s.errAt(i, ""))
				return
			}
			switch raw[i] {
			case ',':
				i = s.ws(i + 1)
			case ']':
				return
			default:
				yield(nil, s.errAt(i, "after array element"))
				return
			}
		}
	}
}

// scanner is the state of one scan of b.
type scanner struct {
	b     []byte
	depth int
}

func (s *scanner) errAt(i int, what string) error {
	if i >= len(s.b) {
		return errors.New("unexpected end of JSON input")
	}
	return fmt.Errorf("invalid character %q at offset %d: %s", s.b[i], i, what)
}

// ws returns the index of the first byte at or after i that is not JSON
// whitespace.
func (s *scanner) ws(i int) int {
	if i < len(s.b) && s.b[i] > ' ' {
		return i // the common case: no whitespace
	}
	for i < len(s.b) {
		switch s.b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// indexed scans the object starting at s.b[i] == '{' and records the value
// of each member whose name is in names in spans, as offsets from i (see
// Index; names nil: record nothing); the value of member nested.Member,
// when it is an object, is indexed into nested. len(s.b) must not exceed
// maxIndexed.
func (s *scanner) indexed(i int, names *Names, spans []Span, nested *Nested) (int, error) {
	s.depth++
	if s.depth > maxDepth {
		return i, errors.New("exceeded max depth")
	}
	defer func() { s.depth-- }()
	base := i
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(s.b) || s.b[i] != '"' {
			return i, s.errAt(i, "looking for beginning of object key string")
		}
		kstart := i
		end, flags, err := s.str(i)
		if err != nil {
			return end, err
		}
		k := -1
		switch {
		case names == nil:
		case flags&strEscaped != 0:
			// Rare: the name must be decoded to be compared. Unescaped names
			// are compared as they are: the known names are text, so a name
			// that is not valid UTF-8 cannot match one either way.
			name, err := DecodeString(s.b[kstart:end])
			switch {
			case errors.Is(err, ErrInvalidText):
				// Not text, so none of the known names.
			case err != nil:
				return end, err
			default:
				k = names.Index([]byte(name))
			}
		default:
			k = names.Index(s.b[kstart+1 : end-1])
		}
		i = s.ws(end)
		if i >= len(s.b) || s.b[i] != ':' {
			return i, s.errAt(i, "after object key")
		}
		i = s.ws(i + 1)
		vstart := i
		plain := false
		switch {
		case nested != nil && k >= 0 && k == nested.Member && i < len(s.b) && s.b[i] == '{':
			if nested.Size != 0 {
				clear(nested.Spans) // a repeated member: the last one wins
			}
			i, err = s.indexed(i, nested.Names, nested.Spans, nil)
			nested.Size = i - vstart
		case i < len(s.b) && s.b[i] == '"':
			var flags uint8
			i, flags, err = s.str(i)
			plain = flags == 0
		default:
			i, err = s.value(i)
		}
		if err != nil {
			return i, err
		}
		if k >= 0 {
			spans[k] = Span{uint32(vstart - base), uint32(i - base), plain}
		}
		i = s.ws(i)
		if i >= len(s.b) {
			return i, s.errAt(i, "")
		}
		switch s.b[i] {
		case ',':
			i = s.ws(i + 1)
		case '}':
			return i + 1, nil
		default:
			return i, s.errAt(i, "after object key:value pair")
		}
	}
}

func (s *scanner) array(i int) (int, error) {
	s.depth++
	if s.depth > maxDepth {
		return i, errors.New("exceeded max depth")
	}
	defer func() { s.depth-- }()
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = s.value(i); err != nil {
			return i, err
		}
		i = s.ws(i)
		if i >= len(s.b) {
			return i, s.errAt(i, "")
		}
		switch s.b[i] {
		case ',':
			i = s.ws(i + 1)
		case ']':
			return i + 1, nil
		default:
			return i, s.errAt(i, "after array element")
		}
	}
}

// value scans one value starting at s.b[i] (no leading whitespace).
func (s *scanner) value(i int) (int, error) {
	if i >= len(s.b) {
		return i, s.errAt(i, "")
	}
	switch c := s.b[i]; {
	case c == '{':
		return s.indexed(i, nil, nil, nil) // an object inside a value: nothing to record
	case c == '[':
		return s.array(i)
	case c == '"':
		end, _, err := s.str(i)
		return end, err
	case c == 't':
		return s.literal(i, "true")
	case c == 'f':
		return s.literal(i, "false")
	case c == 'n':
		return s.literal(i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number(i)
	}
	return i, s.errAt(i, "looking for beginning of value")
}

func (s *scanner) literal(i int, lit string) (int, error) {
	if len(s.b)-i < len(lit) || string(s.b[i:i+len(lit)]) != lit {
		for j := 0; j < len(lit); j++ {
			if i+j >= len(s.b) || s.b[i+j] != lit[j] {
				return i + j, s.errAt(i+j, "in literal "+lit)
			}
		}
	}
	return i + len(lit), nil
}

// What str found in a string besides its syntax.
const (
	strEscaped = 1 << iota // an escape
	strNotUTF8             // bytes that are not UTF-8
)

// str scans the string starting at s.b[i] == '"' and returns the index
// after its closing quote and what it holds: strEscaped when it has an
// escape, strNotUTF8 when the bytes between its quotes are not valid
// UTF-8 (as utf8.Valid decides; such a string is not refused here). Runs
// of ASCII bytes other than '"', '\\' and control characters are skipped
// eight at a time; a byte ≥ 0x80 starts a multi-byte sequence that is
// checked where it is, so that the string is read once.
func (s *scanner) str(i int) (int, uint8, error) {
	b := s.b
	var flags uint8
	for i++; i < len(b); i++ {
		if i+8 <= len(b) {
			m := stopBytes(binary.LittleEndian.Uint64(b[i:]))
			if m == 0 {
				i += 7 // and the loop's i++
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		}
		switch c := b[i]; {
		case c >= 0x80:
			// Text with multi-byte sequences: read it rune by rune, with
			// the short runs of ASCII between them, up to a special byte
			// or a longer run of ASCII (eight bytes at a time again).
			for {
				if n := runeLen(b, i); n > 0 {
					i += n
				} else {
					flags |= strNotUTF8
					i++
				}
				for i < len(b) && plainASCII(b[i]) {
					i++
				}
				if i >= len(b) || b[i] < 0x80 {
					break
				}
			}
			i-- // for the loop's i++
		case c == '"':
			return i + 1, flags, nil
		case c == '\\':
			flags |= strEscaped
			i++
			if i >= len(b) {
				return i, flags, s.errAt(i, "")
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 0; k < 4; k++ {
					i++
					if i >= len(b) || !isHex(b[i]) {
						return i, flags, s.errAt(i, "in \\u hexadecimal character escape")
					}
				}
			default:
				return i, flags, s.errAt(i, "in string escape code")
			}
		case c < 0x20:
			return i, flags, s.errAt(i, "in string literal")
		}
	}
	return i, flags, s.errAt(i, "")
}

// runeLen returns the length of the UTF-8 sequence that starts at b[i], a
// byte ≥ 0x80, or 0 when none does: one code point in its shortest form,
// not a surrogate, at most U+10FFFF (RFC 3629, as unicode/utf8 decodes).
// Hand-rolled: with utf8.DecodeRune in its place BenchmarkIndex took
// 5–15 % longer (564–650 ns against 528–555 ns per record, six runs each).
func runeLen(b []byte, i int) int {
	x := utf8Lead[b[i]]
	n := int(x & 7)
	if n == 0 || i+n > len(b) {
		return 0
	}
	r := utf8Second[x>>3]
	if c := b[i+1]; c < r.lo || r.hi < c {
		return 0
	}
	if n > 2 && (b[i+2]&0xC0 != 0x80 || n > 3 && b[i+3]&0xC0 != 0x80) {
		return 0
	}
	return n
}

// utf8Lead describes each byte as the first of a UTF-8 sequence: its
// length in the low 3 bits (0: no sequence starts with it), the range of
// the second byte (an index into utf8Second) in the others. A constant
// table, for the bytes ≥ 0x80 (ASCII is handled before).
var utf8Lead = func() (t [256]uint8) {
	for c := 0xC2; c < 0xE0; c++ {
		t[c] = 2
	}
	for c := 0xE0; c < 0xF0; c++ {
		t[c] = 3
	}
	for c := 0xF0; c < 0xF5; c++ {
		t[c] = 4
	}
	t[0xE0] |= 1 << 3 // not overlong
	t[0xED] |= 2 << 3 // not a surrogate
	t[0xF0] |= 3 << 3 // not overlong
	t[0xF4] |= 4 << 3 // at most U+10FFFF
	return t
}()

// utf8Second is the range of the second byte of a sequence, by the index
// utf8Lead gives (a constant table).
var utf8Second = [5]struct{ lo, hi byte }{{0x80, 0xBF}, {0xA0, 0xBF}, {0x80, 0x9F}, {0x90, 0xBF}, {0x80, 0x8F}}

// plainASCII reports whether c is an ASCII byte that a string holds as is
// (not '"', '\\' or a control character).
func plainASCII(c byte) bool { return c < 0x80 && c >= 0x20 && c != '"' && c != '\\' }

// stopBytes is specialBytes with the bytes ≥ 0x80 flagged too: the
// lowest set bit of the mask lies in the first byte where str must stop.
func stopBytes(x uint64) uint64 {
	return specialBytes(x) | x&0x8080808080808080
}

// specialBytes returns, for the eight bytes of x (little-endian), a mask
// whose lowest set bit lies in the first byte that is '"', '\\' or a control
// character (< 0x20); 0 when there is none. Bits above the first flagged
// byte may be spurious (borrows), so only the lowest one is meaningful.
func specialBytes(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := x ^ (lo * '"')
	e := x ^ (lo * '\\')
	return ((q-lo)&^q | (e-lo)&^e | (x-lo*0x20)&^x) & hi
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number(i int) (int, error) {
	if s.b[i] == '-' {
		i++
	}
	switch {
	case i < len(s.b) && s.b[i] == '0':
		i++
	case i < len(s.b) && s.b[i] >= '1' && s.b[i] <= '9':
		for i++; i < len(s.b) && isDigit(s.b[i]); i++ {
		}
	default:
		return i, s.errAt(i, "in numeric literal")
	}
	if i < len(s.b) && s.b[i] == '.' {
		i++
		if i >= len(s.b) || !isDigit(s.b[i]) {
			return i, s.errAt(i, "after decimal point in numeric literal")
		}
		for i++; i < len(s.b) && isDigit(s.b[i]); i++ {
		}
	}
	if i < len(s.b) && (s.b[i] == 'e' || s.b[i] == 'E') {
		i++
		if i < len(s.b) && (s.b[i] == '+' || s.b[i] == '-') {
			i++
		}
		if i >= len(s.b) || !isDigit(s.b[i]) {
			return i, s.errAt(i, "in exponent of numeric literal")
		}
		for i++; i < len(s.b) && isDigit(s.b[i]); i++ {
		}
	}
	return i, nil
}
