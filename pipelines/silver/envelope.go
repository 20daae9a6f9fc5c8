package silver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/stages"
)

// Task types of a bronze envelope (fixed by the design).
const (
	TaskTA = "ta.bar"     // a daily price/volume bar, upserted into ta_silver
	TaskSA = "sa.article" // an article, upserted into sa_silver
)

// Envelope is a decoded bronze record.
type Envelope struct {
	// TaskType is TaskTA or TaskSA (Decode refuses anything else).
	TaskType string
	// Payload is the raw JSON object of the task, kept as bytes so that the
	// validator sees the original JSON types. After Decode it aliases the
	// decoded value's bytes, which must not be modified afterwards.
	Payload json.RawMessage
	// TaskID is the optional producer task id; "" when absent. A JSON number
	// is kept in its textual form.
	TaskID string
	// FirstSeen is the optional envelope first_seen time; zero when absent.
	FirstSeen time.Time

	// fields locates the payload's known members as Decode found them (not
	// set for a hand-built Envelope: the stage then parses Payload).
	fields payloadFields
}

// Members of the envelope object that Decode reads, as span indexes.
const (
	envPayload = iota
	envTaskID
	envFirstSeen
	envTaskType
	numEnvMembers
)

// envelopeSlot returns the span index of the envelope member name, or -1.
func envelopeSlot(name []byte) int {
	switch string(name) {
	case "payload":
		return envPayload
	case "task_id":
		return envTaskID
	case "first_seen":
		return envFirstSeen
	case "task_type":
		return envTaskType
	}
	return -1
}

// A field is a payload member that the rules read.
type field int

const (
	fSymbol field = iota
	fTradeDate
	fOpen // fOpen, fHigh, fLow and fClose are consecutive
	fHigh
	fLow
	fClose
	fVolume
	fCurrency
	fVWAP
	fAdjClose
	fPriceMultiplier
	fSource
	fContentHash
	fFirstSeenTime
	fURLCanonical
	fSourceDomain
	fPublisherTime
	fLanguage
	fTitle
	fTextNormalized
	fSymbols
	fAuthor
	fTopicTags
	fHypeRaw
	fHypeCrowd
	fHypeElitist
	fAccountWeightsApplied
	numFields
)

// fieldNames are the JSON names of the fields, by field.
var fieldNames = [numFields]string{
	fSymbol: "symbol", fTradeDate: "trade_date", fOpen: "open", fHigh: "high", fLow: "low", fClose: "close",
	fVolume: "volume", fCurrency: "currency", fVWAP: "vwap", fAdjClose: "adj_close",
	fPriceMultiplier: "price_multiplier", fSource: "source", fContentHash: "content_hash",
	fFirstSeenTime: "first_seen_time", fURLCanonical: "url_canonical", fSourceDomain: "source_domain",
	fPublisherTime: "publisher_time", fLanguage: "language", fTitle: "title",
	fTextNormalized: "text_normalized", fSymbols: "symbols", fAuthor: "author", fTopicTags: "topic_tags",
	fHypeRaw: "hype_raw", fHypeCrowd: "hype_crowd", fHypeElitist: "hype_elitist",
	fAccountWeightsApplied: "account_weights_applied",
}

// payloadSlot returns the field named name, or -1.
func payloadSlot(name []byte) int {
	switch string(name) {
	case "symbol":
		return int(fSymbol)
	case "trade_date":
		return int(fTradeDate)
	case "open":
		return int(fOpen)
	case "high":
		return int(fHigh)
	case "low":
		return int(fLow)
	case "close":
		return int(fClose)
	case "volume":
		return int(fVolume)
	case "currency":
		return int(fCurrency)
	case "vwap":
		return int(fVWAP)
	case "adj_close":
		return int(fAdjClose)
	case "price_multiplier":
		return int(fPriceMultiplier)
	case "source":
		return int(fSource)
	case "content_hash":
		return int(fContentHash)
	case "first_seen_time":
		return int(fFirstSeenTime)
	case "url_canonical":
		return int(fURLCanonical)
	case "source_domain":
		return int(fSourceDomain)
	case "publisher_time":
		return int(fPublisherTime)
	case "language":
		return int(fLanguage)
	case "title":
		return int(fTitle)
	case "text_normalized":
		return int(fTextNormalized)
	case "symbols":
		return int(fSymbols)
	case "author":
		return int(fAuthor)
	case "topic_tags":
		return int(fTopicTags)
	case "hype_raw":
		return int(fHypeRaw)
	case "hype_crowd":
		return int(fHypeCrowd)
	case "hype_elitist":
		return int(fHypeElitist)
	case "account_weights_applied":
		return int(fAccountWeightsApplied)
	}
	return -1
}

// payloadFields locates the fields of a payload object: the last member
// named after each field, as offsets into the object's bytes.
type payloadFields struct {
	// size is the length of the payload object the spans index, 0 when not
	// indexed (an object is at least 2 bytes long).
	size  int
	spans [numFields]span
}

// Decode is the silver pipeline's [stages.Decoder]. It accepts exactly the
// envelope of the package doc (docs/pipelines/silver.md):
//
//   - a value that is not a JSON object, a payload that is absent or not a
//     JSON object, a task_id that is neither a string nor a number, a
//     first_seen that is not an RFC 3339 string, or a task_type or task_id
//     string that is not text (see checkText) ⇒ dead-letter decode_error;
//   - a task_type that is absent, not a string, or not one of TaskTA/TaskSA
//     ⇒ dead-letter unknown_task_type.
//
// The decode checks run before the task type check, as in the seed (the
// payload is parsed before the record is routed). The key is not used: the
// natural key is recomputed from the payload. Decode is safe for concurrent
// use.
func Decode(key, value []byte) (Envelope, error) {
	_ = key
	var env Envelope
	var top [numEnvMembers][]byte
	if err := scanEnvelope(value, &top, &env.fields); err != nil {
		return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: %w", err))
	}
	payload, ok := presentRaw(top[envPayload])
	if !ok {
		return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", errors.New("envelope: payload missing"))
	}
	if kindOf(payload) != kindObject {
		return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: payload must be a JSON object, got %s", describe(payload)))
	}
	env.Payload = payload
	if raw, ok := presentRaw(top[envTaskID]); ok {
		switch kindOf(raw) {
		case kindString:
			s, err := decodeString(raw)
			if err != nil {
				return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: task_id: %w", err))
			}
			env.TaskID = s
		case kindNumber:
			env.TaskID = string(raw)
		default:
			return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: task_id must be a string or a number, got %s", describe(raw)))
		}
	}
	if raw, ok := presentRaw(top[envFirstSeen]); ok {
		t, err := parseTimeField(raw)
		if err != nil {
			return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: first_seen: %w", err))
		}
		env.FirstSeen = t
	}
	tt, ok := presentRaw(top[envTaskType])
	if !ok {
		return Envelope{}, stages.DeadLetter(stages.ReasonUnknownTaskType, "", errors.New("envelope: task_type missing"))
	}
	if kindOf(tt) != kindString {
		return Envelope{}, stages.DeadLetter(stages.ReasonUnknownTaskType, "", fmt.Errorf("envelope: task_type must be a string, got %s", describe(tt)))
	}
	b, err := stringBytes(tt)
	if err != nil {
		return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: task_type: %w", err))
	}
	switch string(b) {
	case TaskTA:
		env.TaskType = TaskTA
	case TaskSA:
		env.TaskType = TaskSA
	default:
		return Envelope{}, stages.DeadLetter(stages.ReasonUnknownTaskType, "", fmt.Errorf("envelope: unknown task_type %q (want %q or %q)", b, TaskTA, TaskSA))
	}
	return env, nil
}

// scanEnvelope validates that value is exactly one JSON object and sets
// top to the raw values of the envelope members Decode reads (nil when
// absent) and fields to the fields of the object held by the last payload
// member, when it is one.
func scanEnvelope(value []byte, top *[numEnvMembers][]byte, fields *payloadFields) error {
	var spans [numEnvMembers]span
	i, err := indexObject(value, spans[:], fields)
	if err != nil {
		return err
	}
	for k, sp := range spans {
		if sp.end != 0 {
			top[k] = value[i+int(sp.off) : i+int(sp.end)]
		}
	}
	return nil
}

// compile-time check that Decode is a stages.Decoder.
var _ stages.Decoder[Envelope] = Decode

// jsonKind is the JSON type of a raw value.
type jsonKind byte

const (
	kindInvalid jsonKind = iota
	kindNull
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k jsonKind) String() string {
	switch k {
	case kindNull:
		return "null"
	case kindBool:
		return "boolean"
	case kindNumber:
		return "number"
	case kindString:
		return "string"
	case kindArray:
		return "array"
	case kindObject:
		return "object"
	}
	return "invalid JSON"
}

// kindOf returns the JSON type of raw, which must be one syntactically valid
// JSON value (as produced by encoding/json for a json.RawMessage).
func kindOf(raw []byte) jsonKind {
	if len(raw) == 0 || raw[0] <= ' ' {
		return kindOfSpaced(raw)
	}
	return firstByteKinds[raw[0]] // the common case: no leading whitespace
}

// kindOfSpaced is kindOf for a value that may start with whitespace (kept
// out of line so that kindOf inlines).
//
//go:noinline
func kindOfSpaced(raw []byte) jsonKind {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return kindInvalid
	}
	return firstByteKinds[raw[0]]
}

// firstByteKinds is the JSON type of a value by its first byte (a constant
// table).
var firstByteKinds = [256]jsonKind{
	'n': kindNull, 't': kindBool, 'f': kindBool, '"': kindString, '[': kindArray, '{': kindObject,
	'-': kindNumber, '0': kindNumber, '1': kindNumber, '2': kindNumber, '3': kindNumber, '4': kindNumber,
	'5': kindNumber, '6': kindNumber, '7': kindNumber, '8': kindNumber, '9': kindNumber,
}

// presentRaw returns raw and whether it is a value other than JSON null;
// raw is nil for an absent member.
func presentRaw(raw []byte) ([]byte, bool) {
	if raw == nil || kindOf(raw) == kindNull {
		return nil, false
	}
	return raw, true
}

// describe renders a raw JSON value for an error message: its type and a
// bounded excerpt.
func describe(raw []byte) string {
	const max = 64
	s := string(bytes.TrimSpace(raw))
	if len(s) > max {
		s = s[:max] + "…"
	}
	return kindOf(raw).String() + " " + s
}

// errInvalidText is the error of a JSON string that is not text: invalid
// UTF-8, or an escaped half of a UTF-16 surrogate pair (see checkText).
var errInvalidText = errors.New("not valid UTF-8 text")

// decodeString decodes a raw JSON string as the scanner delimited it (so it
// holds no raw control characters). Strings without escapes that are valid
// UTF-8 (the common case) are converted without reflection. A string that
// is not text (see checkText) is an error wrapping errInvalidText, where
// encoding/json would put U+FFFD in place of what it cannot decode.
func decodeString(raw []byte) (string, error) {
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
// \uD800–\uDFFF escape. Record values are UTF-8 JSON (docs/topics.md); a
// producer that sends anything else sends bytes the row cannot hold as
// they are (PostgreSQL text is UTF-8).
func checkText(inner []byte) error {
	if !utf8.Valid(inner) {
		return fmt.Errorf("%w: invalid UTF-8", errInvalidText)
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
			return fmt.Errorf("%w: \\u%04X is half of a surrogate pair", errInvalidText, r)
		case 0xDC00 <= r && r < 0xE000:
			return fmt.Errorf("%w: \\u%04X is half of a surrogate pair", errInvalidText, r)
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

// stringBytes decodes a raw JSON string like decodeString but returns its
// bytes: for a plain string (see plainString) a sub-slice of raw, which must
// not be retained (copy it into a string to keep it).
func stringBytes(raw []byte) ([]byte, error) {
	if inner, ok := plainString(raw); ok {
		return inner, nil
	}
	s, err := decodeString(raw)
	if err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// parseTimeField decodes a raw JSON RFC 3339 string, truncated to
// microseconds (PostgreSQL's timestamptz precision).
//
// It takes exactly RFC 3339's date-time (§5.6): YYYY-MM-DD "T" hh:mm:ss, an
// optional "." and fraction digits, then "Z" or ±hh:mm with hours 00–23;
// "T" and "Z" may be lower case (§5.6, note). time.Parse is more lenient
// (a "," before the fraction, a one-digit hour, offsets such as +24:00 or
// +07:60), and those spellings are refused. A leap second (:60) is refused
// too, as time.Parse does: Go cannot represent it.
func parseTimeField(raw []byte) (time.Time, error) {
	if kindOf(raw) != kindString {
		return time.Time{}, fmt.Errorf("want an RFC 3339 string, got %s", describe(raw))
	}
	b, err := stringBytes(raw)
	if err != nil {
		return time.Time{}, err
	}
	if t, ok := parseRFC3339(b); ok {
		return t.Truncate(time.Microsecond), nil
	}
	return parseTimeSlow(b)
}

// parseTimeSlow is parseTimeField for what parseRFC3339 does not take: the
// lower-case spellings of "T" and "Z", or an error.
func parseTimeSlow(b []byte) (time.Time, error) {
	if n := len(b); n > 10 && (b[10] == 't' || b[n-1] == 'z') {
		up := []byte(string(b)) // a copy: b may alias the record
		if up[10] == 't' {
			up[10] = 'T'
		}
		if up[n-1] == 'z' {
			up[n-1] = 'Z'
		}
		if t, ok := parseRFC3339(up); ok {
			return t.Truncate(time.Microsecond), nil
		}
	}
	s := string(b)
	if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time: %w", s, err)
	}
	return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time: want YYYY-MM-DDThh:mm:ss, an optional .fraction, then Z or ±hh:mm (two-digit fields, offset hours 00–23)", s)
}

// parseRFC3339 parses exactly RFC 3339's date-time with upper-case "T" and
// "Z" (see parseTimeField) on bytes, without allocating. When it reports
// ok, time.Parse(time.RFC3339Nano, string(b)) returns the same Time
// (location included); it is also the fast path of parseTimeField.
func parseRFC3339(b []byte) (time.Time, bool) {
	ok := true
	num := func(b []byte, min, max int) int {
		x := 0
		for _, c := range b {
			if c < '0' || '9' < c {
				ok = false
				return min
			}
			x = x*10 + int(c-'0')
		}
		if x < min || max < x {
			ok = false
			return min
		}
		return x
	}
	if len(b) < len("2006-01-02T15:04:05") {
		return time.Time{}, false
	}
	year := num(b[0:4], 0, 9999)
	month := num(b[5:7], 1, 12)
	day := num(b[8:10], 1, daysIn(time.Month(month), year))
	hour := num(b[11:13], 0, 23)
	minute := num(b[14:16], 0, 59)
	sec := num(b[17:19], 0, 59)
	if !ok || !(b[4] == '-' && b[7] == '-' && b[10] == 'T' && b[13] == ':' && b[16] == ':') {
		return time.Time{}, false
	}
	b = b[19:]
	nsec := 0
	if len(b) >= 2 && b[0] == '.' && isDigit(b[1]) {
		n := 2
		for ; n < len(b) && isDigit(b[n]); n++ {
		}
		// As time does: at most 9 digits count, the rest are ignored.
		digits := b[1:min(n, 10)]
		for _, c := range digits {
			nsec = nsec*10 + int(c-'0')
		}
		for k := len(digits); k < 9; k++ {
			nsec *= 10
		}
		b = b[n:]
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	if len(b) == 1 && b[0] == 'Z' {
		return t, true
	}
	if len(b) != len("-07:00") {
		return time.Time{}, false
	}
	hr := num(b[1:3], 0, 23)
	mm := num(b[4:6], 0, 59)
	if !ok || !((b[0] == '-' || b[0] == '+') && b[3] == ':') {
		return time.Time{}, false
	}
	offset := (hr*60 + mm) * 60
	if b[0] == '-' {
		offset = -offset
	}
	t = t.Add(-time.Duration(offset) * time.Second)
	// Like time.Parse: the local zone when it has this offset at t, else an
	// unnamed fixed zone.
	if _, off := t.In(time.Local).Zone(); off == offset {
		return t.In(time.Local), true
	}
	return t.In(time.FixedZone("", offset)), true
}

// daysIn is the number of days of month m of year (as time counts them).
func daysIn(m time.Month, year int) int {
	switch m {
	case time.February:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}
