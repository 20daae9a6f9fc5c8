package silver

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"strings"
	"testing"
)

// checkScanAgainstStdlib asserts that scanObject agrees with encoding/json on
// b: same validity, same members (last duplicate wins), same payload members.
func checkScanAgainstStdlib(t *testing.T, b []byte) {
	t.Helper()
	members, nested, err := scanObject(b, "payload")
	trimmed := bytes.TrimLeft(b, " \t\r\n")
	wantOK := json.Valid(b) && len(trimmed) > 0 && trimmed[0] == '{'
	if (err == nil) != wantOK {
		t.Fatalf("scanObject(%q) err = %v, encoding/json valid object = %v", b, err, wantOK)
	}
	if err != nil {
		return
	}
	var want map[string]json.RawMessage
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("encoding/json: %v", err)
	}
	got := map[string][]byte{}
	for _, m := range members {
		got[string(m.key)] = m.raw
	}
	if len(got) != len(want) {
		t.Fatalf("%q: %d members, encoding/json %d", b, len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || !bytes.Equal(g, bytes.TrimSpace(w)) {
			t.Fatalf("%q: member %q = %q, encoding/json %q", b, k, g, w)
		}
	}
	p, ok := want["payload"]
	if !ok || kindOf(p) != kindObject {
		return
	}
	var wantP map[string]json.RawMessage
	if err := json.Unmarshal(p, &wantP); err != nil {
		t.Fatal(err)
	}
	gotP := map[string][]byte{}
	for _, m := range nested {
		gotP[string(m.key)] = m.raw
	}
	if len(gotP) != len(wantP) {
		t.Fatalf("%q: payload has %d members, encoding/json %d", b, len(gotP), len(wantP))
	}
	for k, w := range wantP {
		if g := gotP[k]; !bytes.Equal(g, bytes.TrimSpace(w)) {
			t.Fatalf("%q: payload member %q = %q, encoding/json %q", b, k, g, w)
		}
	}
}

var scanSeeds = []string{
	``, ` `, `{}`, ` { } `, `{"a":1}`, `{"a":1,}`, `{"a" 1}`, `{"a":}`, `{,}`, `{"a":1 "b":2}`,
	`{"a":1}x`, `{"a":1}{}`, `[1]`, `"s"`, `null`, `1`, `tru`, `{"a":tru}`, `{"a":nul}`, `{"a":falsey}`,
	`{"a":-}`, `{"a":-0}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":1e+}`, `{"a":1E-7}`, `{"a":-12.5e+3}`,
	`{"a":"\u00e9\n\"\\\/"}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"tab	in"}`, "{\"a\":\"\x01\"}", `{"a":"é"}`,
	"{\"a\":\"\xff\"}", `{"a\u0062":2}`, `{"a":1,"a":2}`, `{"a":[1,[2,{"b":[]}]],"c":{"d":{}}}`, `{"a":[1,]}`, `{"a":[,1]}`,
	`{"a":{"b":1}`, `{"payload":{"x":1,"y":[1,2]},"task_type":"ta.bar"}`, `{"payload":{"x":1},"payload":{"y":2}}`,
	`{"payload":{"x":1},"payload":3}`, `{"payload":[{"x":1}]}`, `{"pay\u006coad":{"x":1}}`, `{"payload":{"a":{"b":{"c":1}}}}`,
	"\t{\n\"a\"\r:\n1\n}\n", `{"a":"unterminated}`, `{"a`, `{"a":1`, `{"a":[`, `{"a":"\`,
}

func TestScanObjectAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range scanSeeds {
		checkScanAgainstStdlib(t, []byte(s))
	}
	for _, r := range GenerateCorpus(3, 3000, 0.5) {
		checkScanAgainstStdlib(t, r.Value)
	}
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	if _, _, err := scanObject([]byte(`{"a":`+deep+`}`), ""); err == nil {
		t.Error("nesting beyond maxDepth accepted")
	}
}

func FuzzScanObject(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	for _, r := range GenerateCorpus(4, 50, 0.5) {
		f.Add(r.Value)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkScanAgainstStdlib(t, b)
		checkIndexedAgainstScanObject(t, b)
	})
}

// checkIndexedAgainstScanObject asserts that Decode's indexed scan agrees
// with scanObject on b: same error, the same raw value for every envelope
// member Decode reads, and, when the last payload member is an object, the
// same raw value for every payload field.
func checkIndexedAgainstScanObject(t *testing.T, b []byte) {
	t.Helper()
	members, nested, wantErr := scanObject(b, "payload")
	var top [numEnvMembers][]byte
	var fields payloadFields
	err := scanEnvelope(b, &top, &fields)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("%q: scanEnvelope error %v, scanObject %v", b, err, wantErr)
	}
	if err != nil {
		return
	}
	for name, k := range map[string]int{"payload": envPayload, "task_id": envTaskID, "first_seen": envFirstSeen, "task_type": envTaskType} {
		want, ok := lookup(members, name)
		if ok != (top[k] != nil) || !bytes.Equal(top[k], want) {
			t.Fatalf("%q: member %s = %q, scanObject %q (present %v)", b, name, top[k], want, ok)
		}
	}
	pb := top[envPayload]
	if kindOf(pb) != kindObject {
		return
	}
	if fields.size != len(pb) {
		t.Fatalf("%q: payload indexed over %d bytes, want %d", b, fields.size, len(pb))
	}
	p := payload{b: pb, fields: fields}
	for f := range numFields {
		got, gotOK := p.raw(f)
		want, wantOK := presentRaw(nil)
		if raw, ok := lookup(nested, fieldNames[f]); ok {
			want, wantOK = presentRaw(raw)
		}
		if gotOK != wantOK || !bytes.Equal(got, want) {
			t.Fatalf("%q: payload field %s = %q, scanObject %q", b, fieldNames[f], got, want)
		}
	}
}

func TestIndexedScanAgreesWithScanObject(t *testing.T) {
	t.Parallel()
	for _, s := range scanSeeds {
		checkIndexedAgainstScanObject(t, []byte(s))
	}
	for _, s := range []string{
		`{"payload":{"symbol":"VNM","symbol":"FPT","open":null},"task_type":"ta.bar","task_type":"sa.article"}`,
		`{"payload":{"symbol":"VNM"},"payload":{"url_canonical":"https://a.b"}}`,
		`{"payload":{"symbol":"VNM"},"payload":null}`,
		`{"payload":{"a":1,"symbol":"VNM"},"payload":{"b":"0123456789012345678901234567890"}}`,
		`{"pay\u006coad":{"sym\u0062ol":"VNM","a\"b":1},"task_id":7,"first_seen":null}`,
		` {"payload" : { "open" : 1 , "close" : [ 1 , 2 ] } } `,
		`{"x":{"payload":{"symbol":"NESTED"}},"payload":{}}`,
	} {
		checkIndexedAgainstScanObject(t, []byte(s))
	}
	for _, r := range GenerateCorpus(3, 3000, 0.5) {
		checkIndexedAgainstScanObject(t, r.Value)
	}
}

// TestStringScanEveryOffset puts each special byte at every offset of a
// string around the eight-byte steps of the scanner.
func TestStringScanEveryOffset(t *testing.T) {
	t.Parallel()
	for n := 0; n < 20; n++ {
		for at := 0; at <= n; at++ {
			for _, special := range []string{`"`, `\"`, `\\`, `\u00e9`, `\x`, "\x01", "\x1f", "\n", "é", "\xff", " ", "~", "\x7f"} {
				body := strings.Repeat("a", at) + special + strings.Repeat("b", n-at)
				for _, doc := range []string{`{"k":"` + body + `"}`, `{"` + body + `":1}`, `{"payload":{"title":"` + body + `"}}`} {
					checkScanAgainstStdlib(t, []byte(doc))
					checkIndexedAgainstScanObject(t, []byte(doc))
				}
			}
		}
	}
}

func TestSpecialBytes(t *testing.T) {
	t.Parallel()
	special := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }
	var b [8]byte
	for k := 0; k < 200000; k++ {
		x := uint64(k)*0x9E3779B97F4A7C15 ^ uint64(k)<<29
		binary.LittleEndian.PutUint64(b[:], x)
		if k%3 == 0 { // make special bytes likely
			b[k%8] = []byte{'"', '\\', 0, 0x1f, 0x20, 0x21, 0x5b, 0x5d}[k/3%8]
		}
		x = binary.LittleEndian.Uint64(b[:])
		want := -1
		for i, c := range b {
			if special(c) {
				want = i
				break
			}
		}
		m := specialBytes(x)
		got := -1
		if m != 0 {
			got = bits.TrailingZeros64(m) >> 3
		}
		if got != want {
			t.Fatalf("specialBytes(% x): first special byte %d, want %d", b, got, want)
		}
	}
}
