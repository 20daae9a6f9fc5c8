package jsonidx

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/bits"
	"testing"
	"unicode/utf8"
)

// TestSpecialBytes: specialBytes flags the first byte that is '"', '\\'
// or a control character, stopBytes the first that is one of those or
// ≥ 0x80, in words of mostly ASCII bytes (stopBytes) or of any bytes.
func TestSpecialBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fn     func(uint64) uint64
		is     func(c byte) bool
		mask   uint64
		likely []byte
	}{
		{"specialBytes", specialBytes, func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 },
			^uint64(0), []byte{'"', '\\', 0, 0x1f, 0x20, 0x21, 0x5b, 0x5d}},
		{"stopBytes", stopBytes, func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 },
			0x7f7f7f7f7f7f7f7f, []byte{'"', '\\', 0, 0x1f, 0x7f, 0x80, 0xc3, 0xff}},
	} {
		var b [8]byte
		for k := 0; k < 200000; k++ {
			x := uint64(k)*0x9E3779B97F4A7C15 ^ uint64(k)<<29
			binary.LittleEndian.PutUint64(b[:], x&tc.mask)
			if k%3 == 0 { // make special bytes likely
				b[k%8] = tc.likely[k/3%8]
			}
			x = binary.LittleEndian.Uint64(b[:])
			want := -1
			for i, c := range b {
				if tc.is(c) {
					want = i
					break
				}
			}
			m := tc.fn(x)
			got := -1
			if m != 0 {
				got = bits.TrailingZeros64(m) >> 3
			}
			if got != want {
				t.Fatalf("%s(% x): first byte flagged %d, want %d", tc.name, b, got, want)
			}
		}
	}
}

// TestRuneLen: runeLen accepts exactly the sequences unicode/utf8 decodes
// (every lead byte ≥ 0x80 with continuation bytes at the range limits),
// including sequences cut short by the end of the input or by an ASCII
// byte.
func TestRuneLen(t *testing.T) {
	t.Parallel()
	next := []byte{0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc2, 0xe0, 0xf0, 0xff}
	for c0 := 0x80; c0 <= 0xff; c0++ {
		for _, c1 := range next {
			for _, c2 := range next {
				for _, c3 := range next {
					full := []byte{byte(c0), c1, c2, c3}
					for n := 1; n <= len(full); n++ {
						b := full[:n]
						want := 0
						if r, size := utf8.DecodeRune(b); r != utf8.RuneError || size > 1 {
							want = size
						}
						if got := runeLen(b, 0); got != want {
							t.Fatalf("runeLen(% x) = %d, want %d", b, got, want)
						}
						// Followed by more bytes (read four at a time).
						if got := runeLen(append(b[:n:n], "\"abc"...), 0); got != want {
							t.Fatalf("runeLen(% x, then \"abc) = %d, want %d", b, got, want)
						}
					}
				}
			}
		}
	}
}

// TestDecodeStringText: text decodes as encoding/json decodes it; what is
// not text (invalid UTF-8, an escaped surrogate without its other half) is
// ErrInvalidText where encoding/json would put U+FFFD.
func TestDecodeStringText(t *testing.T) {
	t.Parallel()
	text := []string{`""`, `"plain"`, `"Thị trường"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u1EC7"`, `"\ud83d\ude00"`, `"\uD83D\uDE00x"`,
		`"\ufffd"`, `"\uE000\uDBFF\uDFFF"`, "\"\xf0\x9f\x98\x80\""}
	notText := []string{"\"\xff\"", "\"a\xc3\"", "\"\xed\xa0\x80\"", `"\ud800"`, `"\udc00"`, `"\ud83d\n"`, `"\ud83dx"`, `"\ud83d\u0041"`,
		`"\ude00\ud83d"`, `"\ud83d\ud83d\ude00"`, `"x\udfff"`}
	for _, raw := range text {
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeString([]byte(raw))
		if err != nil || got != want {
			t.Errorf("DecodeString(%s) = %q, %v; want %q", raw, got, err, want)
		}
		b, err := StringBytes([]byte(raw))
		if err != nil || string(b) != want {
			t.Errorf("StringBytes(%s) = %q, %v; want %q", raw, b, err, want)
		}
	}
	for _, raw := range notText {
		if s, err := DecodeString([]byte(raw)); !errors.Is(err, ErrInvalidText) {
			t.Errorf("DecodeString(%s) = %q, %v; want ErrInvalidText", raw, s, err)
		}
		if b, err := StringBytes([]byte(raw)); !errors.Is(err, ErrInvalidText) {
			t.Errorf("StringBytes(%s) = %q, %v; want ErrInvalidText", raw, b, err)
		}
	}
	// A plain string's bytes are the input's, not a copy.
	raw := []byte(`"VNM"`)
	if b, _ := StringBytes(raw); &b[0] != &raw[1] {
		t.Error("StringBytes copied a plain string")
	}
}

func TestKindOf(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]Kind{
		`null`: Null, `true`: Bool, `false`: Bool, `0`: Number, `-1.5e3`: Number, `"s"`: String, `[]`: Array, `{}`: Object,
		" \t\r\n{}": Object, ``: Invalid, ` `: Invalid, `x`: Invalid,
	} {
		if got := KindOf([]byte(raw)); got != want {
			t.Errorf("KindOf(%q) = %v, want %v", raw, got, want)
		}
	}
	if v, ok := Present(nil); ok || v != nil {
		t.Error("Present(nil) is present")
	}
	if _, ok := Present([]byte(`null`)); ok {
		t.Error("Present(null) is present")
	}
	if v, ok := Present([]byte(`0`)); !ok || string(v) != "0" {
		t.Errorf("Present(0) = %q, %v", v, ok)
	}
}
