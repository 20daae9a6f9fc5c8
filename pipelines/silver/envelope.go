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

	// fields caches the payload's members as Decode parsed them (nil for a
	// hand-built Envelope: the stage then parses Payload).
	fields []member
}

// Decode is the silver pipeline's [stages.Decoder]. It accepts exactly the
// envelope of DESIGN §5.1:
//
//   - a value that is not a JSON object, a payload that is absent or not a
//     JSON object, a task_id that is neither a string nor a number, or a
//     first_seen that is not an RFC 3339 string ⇒ dead-letter decode_error;
//   - a task_type that is absent, not a string, or not one of TaskTA/TaskSA
//     ⇒ dead-letter unknown_task_type.
//
// The decode checks run before the task type check, as in the seed (the
// payload is parsed before the record is routed). The key is not used: the
// natural key is recomputed from the payload. Decode is safe for concurrent
// use.
func Decode(key, value []byte) (Envelope, error) {
	_ = key
	top, fields, err := scanObject(value, "payload")
	if err != nil {
		return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: %w", err))
	}
	var env Envelope
	payload, ok := present(top, "payload")
	if !ok {
		return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", errors.New("envelope: payload missing"))
	}
	if kindOf(payload) != kindObject {
		return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: payload must be a JSON object, got %s", describe(payload)))
	}
	env.Payload, env.fields = payload, fields
	if raw, ok := present(top, "task_id"); ok {
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
	if raw, ok := present(top, "first_seen"); ok {
		t, err := parseTimeField(raw)
		if err != nil {
			return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: first_seen: %w", err))
		}
		env.FirstSeen = t
	}
	tt, ok := present(top, "task_type")
	if !ok {
		return Envelope{}, stages.DeadLetter(stages.ReasonUnknownTaskType, "", errors.New("envelope: task_type missing"))
	}
	if kindOf(tt) != kindString {
		return Envelope{}, stages.DeadLetter(stages.ReasonUnknownTaskType, "", fmt.Errorf("envelope: task_type must be a string, got %s", describe(tt)))
	}
	s, err := decodeString(tt)
	if err != nil {
		return Envelope{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("envelope: task_type: %w", err))
	}
	switch s {
	case TaskTA, TaskSA:
		env.TaskType = s
	default:
		return Envelope{}, stages.DeadLetter(stages.ReasonUnknownTaskType, "", fmt.Errorf("envelope: unknown task_type %q (want %q or %q)", s, TaskTA, TaskSA))
	}
	return env, nil
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
	if len(raw) > 0 && (raw[0] == ' ' || raw[0] == '\t' || raw[0] == '\r' || raw[0] == '\n') {
		raw = bytes.TrimLeft(raw, " \t\r\n")
	}
	if len(raw) == 0 {
		return kindInvalid
	}
	switch c := raw[0]; {
	case c == 'n':
		return kindNull
	case c == 't' || c == 'f':
		return kindBool
	case c == '"':
		return kindString
	case c == '[':
		return kindArray
	case c == '{':
		return kindObject
	case c == '-' || (c >= '0' && c <= '9'):
		return kindNumber
	}
	return kindInvalid
}

// present returns the raw value of the member name of an object when it
// exists and is not JSON null.
func present(obj []member, name string) ([]byte, bool) {
	raw, ok := lookup(obj, name)
	if !ok || kindOf(raw) == kindNull {
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

// decodeString decodes a raw JSON string. Strings without escapes (the
// common case) are converted without reflection.
func decodeString(raw []byte) (string, error) {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		inner := raw[1 : len(raw)-1]
		if bytes.IndexByte(inner, '\\') < 0 && validUTF8NoControl(inner) {
			return string(inner), nil
		}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}

// validUTF8NoControl reports whether b is valid UTF-8 without control
// characters, i.e. whether its bytes are already the decoded string.
func validUTF8NoControl(b []byte) bool {
	ascii := true
	for _, c := range b {
		if c < 0x20 {
			return false
		}
		if c >= 0x80 {
			ascii = false
		}
	}
	return ascii || utf8.Valid(b)
}

// parseTimeField decodes a raw JSON RFC 3339 string, truncated to
// microseconds (PostgreSQL's timestamptz precision).
func parseTimeField(raw []byte) (time.Time, error) {
	if kindOf(raw) != kindString {
		return time.Time{}, fmt.Errorf("want an RFC 3339 string, got %s", describe(raw))
	}
	s, err := decodeString(raw)
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time: %w", s, err)
	}
	return t.Truncate(time.Microsecond), nil
}
