package jsonidx_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/pipelines/silver/internal/jsonidx"
)

// checkScanAgainstStdlib asserts that the reference ScanObject agrees with
// encoding/json on b: same validity, same members (last duplicate wins),
// same payload members.
func checkScanAgainstStdlib(t *testing.T, b []byte) {
	t.Helper()
	members, nested, err := jsonidx.ScanObject(b, "payload")
	trimmed := bytes.TrimLeft(b, " \t\r\n")
	wantOK := json.Valid(b) && len(trimmed) > 0 && trimmed[0] == '{'
	if (err == nil) != wantOK {
		t.Fatalf("ScanObject(%q) err = %v, encoding/json valid object = %v", b, err, wantOK)
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
		got[string(m.Key)] = m.Raw
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
	if !ok || jsonidx.KindOf(p) != jsonidx.Object {
		return
	}
	var wantP map[string]json.RawMessage
	if err := json.Unmarshal(p, &wantP); err != nil {
		t.Fatal(err)
	}
	gotP := map[string][]byte{}
	for _, m := range nested {
		gotP[string(m.Key)] = m.Raw
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
	for _, r := range silver.GenerateCorpus(3, 3000, 0.5) {
		checkScanAgainstStdlib(t, r.Value)
	}
	deep := []byte(`{"a":` + strings.Repeat("[", jsonidx.MaxDepth+1) + strings.Repeat("]", jsonidx.MaxDepth+1) + `}`)
	if _, _, err := jsonidx.ScanObject(deep, ""); err == nil {
		t.Error("ScanObject: nesting beyond MaxDepth accepted")
	}
	if _, err := jsonidx.Index(deep, nil, nil, nil); err == nil {
		t.Error("Index: nesting beyond MaxDepth accepted")
	}
}

func FuzzIndex(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	for _, r := range silver.GenerateCorpus(4, 50, 0.5) {
		f.Add(r.Value)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkScanAgainstStdlib(t, b)
		checkIndexAgainstScanObject(t, b)
	})
}

// namesOf returns the set of fixed and of the names of ms that are text
// (no U+FFFD: the reference puts it in place of what is not text, which
// matches no name), without repeats, at most 200.
func namesOf(ms []jsonidx.Member, fixed ...string) (*jsonidx.Names, []string) {
	seen := map[string]bool{}
	var list []string
	add := func(s string) {
		if !seen[s] && len(list) < 200 && utf8.ValidString(s) && !strings.ContainsRune(s, utf8.RuneError) {
			seen[s] = true
			list = append(list, s)
		}
	}
	for _, s := range fixed {
		add(s)
	}
	for _, m := range ms {
		add(string(m.Key))
	}
	return jsonidx.NewNames(list...), list
}

// checkIndexAgainstScanObject asserts that Index agrees with the
// reference ScanObject on b when it indexes the envelope members, every
// other member name of b, and the object held by the last payload member
// (Nested): same error (also when recording nothing), the same value for
// every name, present or absent, and the payload's size.
func checkIndexAgainstScanObject(t *testing.T, b []byte) {
	t.Helper()
	members, nested, wantErr := jsonidx.ScanObject(b, "payload")
	top, topList := namesOf(members, "payload", "task_id", "first_seen", "task_type")
	inner, innerList := namesOf(nested, "symbol", "url_canonical", "title")
	spans := make([]jsonidx.Span, top.Len())
	n := jsonidx.Nested{Member: top.Index([]byte("payload")), Names: inner, Spans: make([]jsonidx.Span, inner.Len())}
	start, err := jsonidx.Index(b, top, spans, &n)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("%q: Index error %v, ScanObject %v", b, err, wantErr)
	}
	if _, err := jsonidx.Index(b, nil, nil, nil); fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("%q: Index without names: error %v, ScanObject %v", b, err, wantErr)
	}
	if err != nil {
		return
	}
	if start != len(b)-len(bytes.TrimLeft(b, " \t\r\n")) {
		t.Fatalf("%q: object starts at %d", b, start)
	}
	obj := b[start:]
	for k, name := range topList {
		want, wantOK := jsonidx.Lookup(members, name)
		got, ok := spans[k].Value(obj)
		if ok != wantOK || !bytes.Equal(got, want) {
			t.Fatalf("%q: member %s = %q, ScanObject %q (present %v)", b, name, got, want, wantOK)
		}
		checkText(t, b, name, spans[k], obj, want)
	}
	pb, _ := jsonidx.Lookup(members, "payload")
	if jsonidx.KindOf(pb) != jsonidx.Object {
		return
	}
	if n.Size != len(pb) {
		t.Fatalf("%q: payload indexed over %d bytes, want %d", b, n.Size, len(pb))
	}
	for k, name := range innerList {
		want, wantOK := jsonidx.Lookup(nested, name)
		got, ok := n.Spans[k].Value(pb)
		if ok != wantOK || !bytes.Equal(got, want) {
			t.Fatalf("%q: payload member %s = %q, ScanObject %q (present %v)", b, name, got, want, wantOK)
		}
		checkText(t, b, "payload."+name, n.Spans[k], pb, want)
	}
}

// checkText asserts that sp.Text gives the value of the member whose JSON
// text is raw (nil: absent) exactly when it is a string without escapes
// whose bytes are valid UTF-8, and then what StringBytes decodes.
func checkText(t *testing.T, b []byte, name string, sp jsonidx.Span, obj, raw []byte) {
	t.Helper()
	got, ok := sp.Text(obj)
	plain := jsonidx.KindOf(raw) == jsonidx.String && !bytes.Contains(raw, []byte(`\`)) && utf8.Valid(raw[1:len(raw)-1])
	if ok != plain {
		t.Fatalf("%q: member %s (%q): Text reports %v, want %v", b, name, raw, ok, plain)
	}
	if !ok {
		return
	}
	want, err := jsonidx.StringBytes(raw)
	if err != nil || !bytes.Equal(got, want) || &got[0:1][0] != &raw[1:2][0] {
		t.Fatalf("%q: member %s: Text %q, StringBytes %q, %v (Text must be a sub-slice of the input)", b, name, got, want, err)
	}
}

func TestIndexAgreesWithScanObject(t *testing.T) {
	t.Parallel()
	for _, s := range scanSeeds {
		checkIndexAgainstScanObject(t, []byte(s))
	}
	for _, s := range []string{
		`{"payload":{"symbol":"VNM","symbol":"FPT","open":null},"task_type":"ta.bar","task_type":"sa.article"}`,
		`{"payload":{"symbol":"VNM"},"payload":{"url_canonical":"https://a.b"}}`,
		`{"payload":{"symbol":"VNM"},"payload":null}`,
		`{"payload":{"a":1,"symbol":"VNM"},"payload":{"b":"0123456789012345678901234567890"}}`,
		`{"pay\u006coad":{"sym\u0062ol":"VNM","a\"b":1},"task_id":7,"first_seen":null}`,
		` {"payload" : { "open" : 1 , "close" : [ 1 , 2 ] } } `,
		`{"x":{"payload":{"symbol":"NESTED"}},"payload":{}}`,
		"{\"payload\":{\"t\\u00edtle\":1,\"title\\ud800\":2,\"title\xff\":3,\"title\":4}}",
	} {
		checkIndexAgainstScanObject(t, []byte(s))
	}
	for _, r := range silver.GenerateCorpus(3, 3000, 0.5) {
		checkIndexAgainstScanObject(t, r.Value)
	}
}

// TestStringScanEveryOffset puts each special byte at every offset of a
// string around the eight-byte steps of the scanner.
func TestStringScanEveryOffset(t *testing.T) {
	t.Parallel()
	for n := 0; n < 20; n++ {
		for at := 0; at <= n; at++ {
			for _, special := range []string{`"`, `\"`, `\\`, `\u00e9`, `\x`, "\x01", "\x1f", "\n", "é", "\xff", " ", "~", "\x7f",
				"ệ", "😀", "é\"", "ệa\\n", "\xc3", "\xc3\"", "\xe1\xbb", "\xe1\xbb\"", "\xf0\x9f\x98", "\xed\xa0\x80", "\xc0\xaf",
				"\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\x80", "é\xff", "\xffé"} {
				body := strings.Repeat("a", at) + special + strings.Repeat("b", n-at)
				for _, doc := range []string{`{"k":"` + body + `"}`, `{"` + body + `":1}`, `{"payload":{"title":"` + body + `"}}`} {
					checkScanAgainstStdlib(t, []byte(doc))
					checkIndexAgainstScanObject(t, []byte(doc))
				}
			}
		}
	}
}

// TestIndexElements: Elements yields what the reference scanner finds in
// an array held by a member, and a syntax error last.
func TestIndexElements(t *testing.T) {
	t.Parallel()
	names := jsonidx.NewNames("a")
	for _, tc := range []struct {
		array string
		want  []string
	}{
		{`[]`, nil}, {`[ ]`, nil}, {`[1]`, []string{`1`}}, {`[ "x" , [1,2] ,{"k":[]}, null ]`, []string{`"x"`, `[1,2]`, `{"k":[]}`, `null`}},
	} {
		var spans [1]jsonidx.Span
		b := []byte(`{"a":` + tc.array + `}`)
		start, err := jsonidx.Index(b, names, spans[:], nil)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		raw, _ := spans[0].Value(b[start:])
		var got []string
		for e, err := range jsonidx.Elements(raw) {
			if err != nil {
				t.Fatalf("%s: %v", raw, err)
			}
			got = append(got, string(e))
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Elements(%s) = %q, want %q", raw, got, tc.want)
		}
	}
	// Elements of an array that was not validated: the error comes last.
	var got []string
	var last error
	for e, err := range jsonidx.Elements([]byte(`[1,2 3]`)) {
		got, last = append(got, string(e)), err
	}
	if fmt.Sprint(got[:2]) != "[1 2]" || last == nil {
		t.Errorf("Elements([1,2 3]) = %q, last error %v", got, last)
	}
}

func TestRuneCount(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "a", "é", "ệ", "😀", strings.Repeat("ệa😀", 11), "Thị trường chứng khoán", "\uFFFD\u0000x"} {
		for k := 0; k < 9; k++ {
			in := strings.Repeat("x", k) + s
			if got, want := jsonidx.RuneCount([]byte(in)), utf8.RuneCountInString(in); got != want {
				t.Errorf("RuneCount(%q) = %d, want %d", in, got, want)
			}
		}
	}
	top := jsonidx.NewNames("payload")
	fields := jsonidx.NewNames("text_normalized")
	texts := 0
	for _, r := range silver.GenerateCorpus(5, 500, 0) {
		var spans, pspans [1]jsonidx.Span
		n := jsonidx.Nested{Member: 0, Names: fields, Spans: pspans[:]}
		start, err := jsonidx.Index(r.Value, top, spans[:], &n)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := spans[0].Value(r.Value[start:])
		raw, ok := pspans[0].Value(p)
		if !ok {
			continue // a ta record
		}
		text, err := jsonidx.StringBytes(raw)
		if err != nil {
			t.Fatal(err)
		}
		texts++
		if got, want := jsonidx.RuneCount(text), utf8.RuneCount(text); got != want {
			t.Errorf("RuneCount = %d, want %d", got, want)
		}
	}
	if texts == 0 {
		t.Fatal("no sa record in the corpus")
	}
}

// BenchmarkIndex indexes the envelopes of a corpus and their payloads, as
// silver's Decode does, with sets of names of the same sizes.
func BenchmarkIndex(b *testing.B) {
	recs := silver.GenerateCorpus(1, 10000, 0.1)
	top := jsonidx.NewNames("payload", "task_id", "first_seen", "task_type")
	fields := jsonidx.NewNames("symbol", "trade_date", "open", "high", "low", "close", "volume", "currency", "vwap", "adj_close",
		"price_multiplier", "source", "content_hash", "first_seen_time", "url_canonical", "source_domain", "publisher_time",
		"language", "title", "text_normalized", "symbols", "author", "topic_tags", "hype_raw", "hype_crowd", "hype_elitist",
		"account_weights_applied")
	var size int64
	for _, r := range recs {
		size += int64(len(r.Value))
	}
	b.SetBytes(size / int64(len(recs)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		var spans [4]jsonidx.Span
		var pspans [27]jsonidx.Span
		n := jsonidx.Nested{Member: 0, Names: fields, Spans: pspans[:]}
		_, _ = jsonidx.Index(recs[i%len(recs)].Value, top, spans[:], &n)
		i++
	}
}
