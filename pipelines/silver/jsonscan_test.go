package silver

import (
	"bytes"
	"encoding/json"
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
	})
}
