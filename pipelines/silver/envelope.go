package silver

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/pipelines/silver/internal/jsonidx"
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
	// is kept in its textual form. After Decode it may alias the decoded
	// value's bytes, like Payload.
	TaskID string
	// FirstSeen is the optional envelope first_seen time; zero when absent.
	FirstSeen time.Time

	// fields locates the payload's known members as Decode found them (not
	// set for a hand-built Envelope: the stage then parses Payload).
	fields payloadFields
}

// Members of the envelope object that Decode reads, as indexes of
// envelopeNames.
const (
	envPayload = iota
	envTaskID
	envFirstSeen
	envTaskType
	numEnvMembers
)

// envelopeMemberNames are the JSON names of the envelope members, by index.
var envelopeMemberNames = [numEnvMembers]string{
	envPayload: "payload", envTaskID: "task_id", envFirstSeen: "first_seen", envTaskType: "task_type",
}

// envelopeNames is the set of envelopeMemberNames (immutable).
var envelopeNames = jsonidx.NewNames(envelopeMemberNames[:]...)

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

// payloadNames is the set of fieldNames, a field's index being the field
// (immutable).
var payloadNames = jsonidx.NewNames(fieldNames[:]...)

// payloadFields locates the fields of a payload object: the last member
// named after each field, as spans of the object's bytes.
type payloadFields struct {
	// size is the length of the payload object the spans index, 0 when not
	// indexed (an object is at least 2 bytes long).
	size int
	// at is the object's first byte: a Payload replaced by other bytes of
	// the same size is not the one indexed (its spans may mark as plain a
	// string that now holds an escape or bytes that are not UTF-8).
	at    *byte
	spans [numFields]jsonidx.Span
}

// Decode is the silver pipeline's [stages.Decoder]. It accepts exactly the
// envelope of the package doc (docs/pipelines/silver.md):
//
//   - a value that is not a JSON object, a payload that is absent or not a
//     JSON object, a task_id that is neither a string nor a number, a
//     first_seen that is not an RFC 3339 string, or a task_type or task_id
//     string that is not text (invalid UTF-8, an escaped half of a
//     surrogate pair) ⇒ dead-letter decode_error;
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
	var top envelopeMembers
	if err := top.scan(value, &env.fields); err != nil {
		return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: %w", err))
	}
	payload, ok := top.raw(envPayload)
	if !ok {
		return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", errors.New("envelope: payload missing"))
	}
	if jsonidx.KindOf(payload) != jsonidx.Object {
		return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: payload must be a JSON object, got %s", jsonidx.Describe(payload)))
	}
	env.Payload = payload
	env.fields.at = unsafe.SliceData(payload)
	if raw, ok := top.raw(envTaskID); ok {
		switch jsonidx.KindOf(raw) {
		case jsonidx.String:
			if b, ok := top.spans[envTaskID].Text(top.obj); ok {
				env.TaskID = unsafe.String(unsafe.SliceData(b), len(b)) // aliases value, as Payload does
				break
			}
			s, err := jsonidx.DecodeString(raw)
			if err != nil {
				return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: task_id: %w", err))
			}
			env.TaskID = s
		case jsonidx.Number:
			env.TaskID = unsafe.String(unsafe.SliceData(raw), len(raw))
		default:
			return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: task_id must be a string or a number, got %s", jsonidx.Describe(raw)))
		}
	}
	if raw, ok := top.raw(envFirstSeen); ok {
		t, err := parseTime(top.spans[envFirstSeen], top.obj, raw)
		if err != nil {
			return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: first_seen: %w", err))
		}
		env.FirstSeen = t
	}
	tt, ok := top.raw(envTaskType)
	if !ok {
		return Envelope{}, stages.DeadLetter(stages.ReasonUnknownTaskType, "", errors.New("envelope: task_type missing"))
	}
	if jsonidx.KindOf(tt) != jsonidx.String {
		return Envelope{}, stages.DeadLetter(stages.ReasonUnknownTaskType, "", fmt.Errorf("envelope: task_type must be a string, got %s", jsonidx.Describe(tt)))
	}
	b, ok := top.spans[envTaskType].Text(top.obj)
	if !ok {
		var err error
		if b, err = jsonidx.StringBytes(tt); err != nil {
			return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: task_type: %w", err))
		}
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

// envelopeMembers locates the envelope members Decode reads in obj, the
// envelope object from its '{'.
type envelopeMembers struct {
	obj   []byte
	spans [numEnvMembers]jsonidx.Span
}

// scan validates that value is exactly one JSON object, locates the
// envelope members Decode reads, and sets fields to the fields of the
// object held by the last payload member, when it is one.
func (e *envelopeMembers) scan(value []byte, fields *payloadFields) error {
	nested := jsonidx.Nested{Member: envPayload, Names: payloadNames, Spans: fields.spans[:]}
	i, err := jsonidx.Index(value, envelopeNames, e.spans[:], &nested)
	fields.size = nested.Size
	if err != nil {
		return err
	}
	e.obj = value[i:]
	return nil
}

// raw returns the JSON text of member k when it is present and not null.
func (e *envelopeMembers) raw(k int) ([]byte, bool) {
	v, _ := e.spans[k].Value(e.obj)
	return jsonidx.Present(v)
}

// parseTime is jsonidx.ParseTime of raw, the value sp locates in obj,
// without reading a plain string's bytes twice.
func parseTime(sp jsonidx.Span, obj, raw []byte) (time.Time, error) {
	if b, ok := sp.Text(obj); ok {
		return jsonidx.ParseTimeText(b)
	}
	return jsonidx.ParseTime(raw)
}

// compile-time check that Decode is a stages.Decoder.
var _ stages.Decoder[Envelope] = Decode

// payload gives typed access to the fields of a payload object. JSON null
// is treated as absent.
type payload struct {
	b []byte // the payload object, from its '{'
	// fields locates the fields in b. (It is a copy: a pointer into the
	// Envelope would make it escape to the heap.)
	fields payloadFields
}

// index sets p to the payload of env: the fields Decode located, or, for a
// hand-built Envelope (or one whose Payload was replaced), the fields found
// by parsing env.Payload, which dead-letters decode_error when it is not
// exactly one JSON object.
func (p *payload) index(env *Envelope) error {
	p.b = env.Payload
	if env.fields.size != 0 && env.fields.size == len(env.Payload) && env.fields.at == unsafe.SliceData(env.Payload) {
		p.fields = env.fields
		return nil
	}
	start, err := jsonidx.Index(env.Payload, payloadNames, p.fields.spans[:], nil)
	if err != nil {
		return stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("payload: %w", err))
	}
	p.b = env.Payload[start:]
	return nil
}

// raw returns the JSON text of field f (the last member of that name) when
// it is present and not null.
func (p *payload) raw(f field) ([]byte, bool) {
	raw, ok := p.fields.spans[f].Value(p.b)
	if !ok {
		return nil, false
	}
	return jsonidx.Present(raw)
}

func typeErr(name, want string, raw []byte) error {
	return fmt.Errorf("%s: want %s, got %s", name, want, jsonidx.Describe(raw))
}

// requiredString is optionalString with absence an error.
func (p *payload) requiredString(f field) ([]byte, error) {
	s, ok, err := p.optionalString(f)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s missing", fieldNames[f])
	}
	return s, nil
}

// optionalString returns the decoded bytes of string field f (see
// jsonidx.StringBytes: not to be retained as they are).
func (p *payload) optionalString(f field) ([]byte, bool, error) {
	if s, ok := p.fields.spans[f].Text(p.b); ok {
		return s, true, nil // the common case: checked by the scan
	}
	raw, ok := p.raw(f)
	if !ok {
		return nil, false, nil
	}
	if jsonidx.KindOf(raw) != jsonidx.String {
		return nil, false, typeErr(fieldNames[f], "a string", raw)
	}
	s, err := jsonidx.StringBytes(raw)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", fieldNames[f], err)
	}
	return s, true, nil
}

// optionalStringPtr has string field f stored in *dst by t and returns
// dst, or nil when f is absent.
func (p *payload) optionalStringPtr(f field, dst *string, t *rowText) (*string, error) {
	s, ok, err := p.optionalString(f)
	if err != nil || !ok {
		return nil, err
	}
	t.add(dst, s)
	return dst, nil
}

func (p *payload) requiredNumber(f field) ([]byte, error) {
	raw, ok := p.raw(f)
	if !ok {
		return nil, fmt.Errorf("%s missing", fieldNames[f])
	}
	if jsonidx.KindOf(raw) != jsonidx.Number {
		return nil, typeErr(fieldNames[f], "a number", raw)
	}
	return raw, nil
}

// optionalFloat stores number field f in *dst and returns dst, or nil when
// f is absent.
func (p *payload) optionalFloat(f field, dst *float64) (*float64, error) {
	raw, ok := p.raw(f)
	if !ok {
		return nil, nil
	}
	if jsonidx.KindOf(raw) != jsonidx.Number {
		return nil, typeErr(fieldNames[f], "a number", raw)
	}
	x, err := jsonidx.ParseFloat(raw)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", fieldNames[f], raw, err)
	}
	*dst = x
	return dst, nil
}

// optionalBool stores boolean field f in *dst and returns dst, or nil when
// f is absent.
func (p *payload) optionalBool(f field, dst *bool) (*bool, error) {
	raw, ok := p.raw(f)
	if !ok {
		return nil, nil
	}
	if jsonidx.KindOf(raw) != jsonidx.Bool {
		return nil, typeErr(fieldNames[f], "a boolean", raw)
	}
	*dst = raw[0] == 't'
	return dst, nil
}

func (p *payload) optionalTime(f field) (time.Time, bool, error) {
	raw, ok := p.raw(f)
	if !ok {
		return time.Time{}, false, nil
	}
	t, err := parseTime(p.fields.spans[f], p.b, raw)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%s: %w", fieldNames[f], err)
	}
	return t, true, nil
}

// optionalStrings decodes an array of strings, whose elements t stores;
// an element of another type is an error naming its index. check, when
// not nil, is then called on each element in order; its error is
// returned as is.
func (p *payload) optionalStrings(f field, t *rowText, check func(i int, e []byte) error) ([]string, bool, error) {
	raw, ok := p.raw(f)
	if !ok {
		return nil, false, nil
	}
	name := fieldNames[f]
	if jsonidx.KindOf(raw) != jsonidx.Array {
		return nil, false, typeErr(name, "an array of strings", raw)
	}
	// Check every element, in order, before copying them into exactly sized
	// memory.
	var buf [8][]byte
	elems := buf[:0]
	for e, err := range jsonidx.Elements(raw) {
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", name, err)
		}
		if jsonidx.KindOf(e) != jsonidx.String {
			return nil, false, typeErr(fmt.Sprintf("%s[%d]", name, len(elems)), "a string", e)
		}
		s, err := jsonidx.StringBytes(e)
		if err != nil {
			return nil, false, fmt.Errorf("%s[%d]: %w", name, len(elems), err)
		}
		elems = append(elems, s)
	}
	if check != nil {
		for i, e := range elems {
			if err := check(i, e); err != nil {
				return nil, false, err
			}
		}
	}
	out := t.mem.strings(len(elems))
	for i, e := range elems {
		t.add(&out[i], e)
	}
	return out, true, nil
}

// rowText gathers the strings of one row as views of the record being
// transformed (valid until the transform returns) and, once the row is
// valid (done), copies them into memory that they share, carved from mem:
// no allocation of their own, and nothing carved for a record that fails a
// rule.
type rowText struct {
	mem  *rowMemory
	n    int
	size int
	dst  [rowTextViews]*string
	src  [rowTextViews][]byte
}

// rowTextViews is how many strings a rowText shares; more are copied one
// by one.
const rowTextViews = 24

// add has b stored in *dst by done.
func (t *rowText) add(dst *string, b []byte) {
	if t.n == len(t.dst) {
		*dst = string(b)
		return
	}
	t.dst[t.n], t.src[t.n] = dst, b
	t.n++
	t.size += len(b)
}

// done stores the strings added.
func (t *rowText) done() {
	if t.size == 0 {
		return // only empty strings: the destinations hold "" already
	}
	buf := t.mem.bytes(t.size)
	for _, b := range t.src[:t.n] {
		buf = append(buf, b...)
	}
	// buf is never modified again: the strings may share it.
	blob := unsafe.String(unsafe.SliceData(buf), len(buf))
	off := 0
	for i, b := range t.src[:t.n] {
		*t.dst[i] = blob[off : off+len(b)]
		off += len(b)
	}
}
