package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages/dlq"
)

// inspectLine writes r as dlq inspect --json does and checks the line: one
// line, UTF-8, valid JSON; it returns the decoded line.
func inspectLine(t *testing.T, r dlq.Record) dlqJSON {
	t.Helper()
	var out bytes.Buffer
	if err := writeDLQJSON(&out, r); err != nil {
		t.Fatalf("writeDLQJSON: %v", err)
	}
	line := out.Bytes()
	if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
		t.Fatalf("not one line: %q", line)
	}
	// json.Valid does not check UTF-8.
	if !utf8.Valid(line) || !json.Valid(line) {
		t.Fatalf("not UTF-8 JSON: %q", line)
	}
	var j dlqJSON
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		t.Fatalf("decode %q: %v", line, err)
	}
	return j
}

// field is the bytes a text-or-base64 field stands for.
func field(t *testing.T, s, encoding string) []byte {
	t.Helper()
	switch encoding {
	case "":
		return []byte(s)
	case "base64":
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatalf("base64 field %q: %v", s, err)
		}
		return b
	}
	t.Fatalf("unknown encoding %q", encoding)
	return nil
}

// value is the bytes dlqJSON.Value stands for. A "json" value must also
// decode to exactly what it says: no string in it may hold U+FFFD unless
// the value spells one out (a lone surrogate escape decodes to U+FFFD).
func value(t *testing.T, j dlqJSON) []byte {
	t.Helper()
	switch j.ValueEncoding {
	case "json":
		var v any
		if err := json.Unmarshal(j.Value, &v); err != nil {
			t.Fatalf("json value %q: %v", j.Value, err)
		}
		spelled := bytes.Contains(j.Value, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(j.Value), []byte(`\ufffd`))
		if !spelled && holdsReplacement(v) {
			t.Fatalf("json value %q decodes to U+FFFD (a lone surrogate?)", j.Value)
		}
		return j.Value
	case "text":
		var s string
		if err := json.Unmarshal(j.Value, &s); err != nil {
			t.Fatalf("text value %q: %v", j.Value, err)
		}
		return []byte(s)
	case "base64":
		var s string
		if err := json.Unmarshal(j.Value, &s); err != nil {
			t.Fatalf("base64 value %q: %v", j.Value, err)
		}
		return field(t, s, "base64")
	}
	t.Fatalf("unknown value_encoding %q", j.ValueEncoding)
	return nil
}

func holdsReplacement(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, utf8.RuneError)
	case []any:
		for _, e := range v {
			if holdsReplacement(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, utf8.RuneError) || holdsReplacement(e) {
				return true
			}
		}
	}
	return false
}

func fuzzRecord(key, val []byte, hkey string, hval []byte, ms int64, errText string) dlq.Record {
	return dlq.Record{Topic: "bronze.dlq", Partition: 2, Offset: 41, Timestamp: time.UnixMilli(ms), Key: key, Value: val,
		Headers: []kgo.RecordHeader{{Key: "dlq.reason", Value: []byte("decode_error")}, {Key: hkey, Value: hval}},
		Reason:  "decode_error", Error: errText, SourcePartition: -1, SourceOffset: -1, FailedAt: time.UnixMilli(ms)}
}

// dlq inspect --json used to embed any value json.Valid accepted: a value
// with bytes that are not UTF-8 inside a JSON string made the line invalid
// (other tools refuse it, Go replaces the bytes), a lone surrogate escape
// decoded to U+FFFD, HTML characters and white space were rewritten, keys
// and header values that were not UTF-8 came out as U+FFFD, and a
// timestamp past year 9999 failed the command. Every line is now UTF-8
// JSON that gives back the record's exact bytes.
func TestInspectJSONEncodings(t *testing.T) {
	for _, tc := range []struct {
		value, encoding string
	}{
		{`{"symbol":"VNM","close":71.2}`, "json"},
		{`{"h":"<a&b>"}`, "json"},
		{`"\ud83d\ude00"`, "json"}, // a surrogate pair is one character
		{`[1,"\u00e9"]`, "json"},
		{`{"a": 1}`, "text"}, // not compact: the encoder would rewrite it
		{`"\ud800"`, "text"},
		{`["x\udc00"]`, "text"},
		{`"\ud800\u0041"`, "text"},
		{`not json`, "text"},
		{``, "text"},
		{"{\"a\":\"\xff\"}", "base64"}, // json.Valid accepts it
		{"\"\xed\xa0\x80\"", "base64"}, // a surrogate in UTF-8 form is not UTF-8
		{"\xff\xfe", "base64"},
	} {
		j := inspectLine(t, fuzzRecord([]byte("K"), []byte(tc.value), "h", []byte("v"), 1714554000000, "e"))
		if j.ValueEncoding != tc.encoding || !bytes.Equal(value(t, j), []byte(tc.value)) {
			t.Errorf("value %q: encoding %q, decodes to %q; want %q and the same bytes", tc.value, j.ValueEncoding, value(t, j), tc.encoding)
		}
	}

	j := inspectLine(t, fuzzRecord([]byte("\xffK"), []byte(`{}`), "h\xfe", []byte("\xc3"), 1714554000000, "e\xff"))
	if j.KeyEncoding != "base64" || string(field(t, j.Key, j.KeyEncoding)) != "\xffK" {
		t.Errorf("key %q (%s), want base64 of the bytes", j.Key, j.KeyEncoding)
	}
	if h := j.Headers[1]; h.KeyEncoding != "base64" || h.ValueEncoding != "base64" ||
		string(field(t, h.Key, h.KeyEncoding)) != "h\xfe" || string(field(t, h.Value, h.ValueEncoding)) != "\xc3" {
		t.Errorf("header %+v, want both sides base64 of the bytes", h)
	}
	if h := j.Headers[0]; h.Key != "dlq.reason" || h.Value != "decode_error" || h.KeyEncoding != "" || h.ValueEncoding != "" {
		t.Errorf("UTF-8 header %+v, want plain strings", h)
	}

	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	j = inspectLine(t, fuzzRecord([]byte("K"), []byte(`{}`), "h", nil, far, "e"))
	if j.Timestamp != nil || j.TimestampMs != far || j.FailedAt != nil {
		t.Errorf("year 10000: timestamp %v, ms %d, failed_at %v; want no RFC 3339 fields and the milliseconds", j.Timestamp, j.TimestampMs, j.FailedAt)
	}
	j = inspectLine(t, fuzzRecord([]byte("K"), []byte(`{}`), "h", nil, 1714554000000, "e"))
	if j.Timestamp == nil || !j.Timestamp.Equal(time.UnixMilli(1714554000000)) || j.FailedAt == nil {
		t.Errorf("timestamp %v failed_at %v, want both", j.Timestamp, j.FailedAt)
	}
}

// Whatever the bytes of a dead letter, its --json line is one line of
// UTF-8 JSON that decodes strictly, and its key, value, header and
// timestamp come back exactly.
func FuzzInspectJSON(f *testing.F) {
	f.Add([]byte("VNM"), []byte(`{"symbol":"VNM"}`), "dlq.rule", []byte("ta.price"), int64(1714554000000), "bad")
	f.Add([]byte{0xff}, []byte("\xff\xfe"), "k\xff", []byte("\xc3"), int64(math.MaxInt64), "e\xff")
	f.Add([]byte(nil), []byte(`"\ud800"`), "", []byte(nil), int64(math.MinInt64), "")
	f.Add([]byte("k"), []byte(`{"a": "<&>"}`), "h", []byte(`"\udc00"`), int64(-1), "<&>")
	f.Add([]byte("k"), []byte(`["\ud83d\ude00","\\ud800"]`), "h", []byte("v"), int64(0), "\u2028")
	f.Add([]byte("k"), []byte("\"\xed\xa0\x80\""), "h", []byte("v"), int64(253402300800000), "e")
	f.Fuzz(func(t *testing.T, key, val []byte, hkey string, hval []byte, ms int64, errText string) {
		j := inspectLine(t, fuzzRecord(key, val, hkey, hval, ms, errText))
		if got := field(t, j.Key, j.KeyEncoding); !bytes.Equal(got, key) {
			t.Fatalf("key %q came back as %q", key, got)
		}
		if got := value(t, j); !bytes.Equal(got, val) {
			t.Fatalf("value %q came back as %q (%s)", val, got, j.ValueEncoding)
		}
		if len(j.Headers) != 2 {
			t.Fatalf("%d headers, want 2", len(j.Headers))
		}
		h := j.Headers[1]
		if got := field(t, h.Key, h.KeyEncoding); string(got) != hkey {
			t.Fatalf("header key %q came back as %q", hkey, got)
		}
		if got := field(t, h.Value, h.ValueEncoding); !bytes.Equal(got, hval) {
			t.Fatalf("header value %q came back as %q", hval, got)
		}
		if j.TimestampMs != ms || (j.Timestamp != nil && j.Timestamp.UnixMilli() != ms) {
			t.Fatalf("timestamp %d came back as %d / %v", ms, j.TimestampMs, j.Timestamp)
		}
	})
}
