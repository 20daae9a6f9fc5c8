package silver

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// TestInvalidUTF8InEveryString puts bytes that are not UTF-8 (of each
// kind unicode/utf8 refuses) at the start, in the middle and at the end of
// every string the envelope and the rules read: the record is dead-lettered
// decode_error without a rule wherever they are, except in language (then
// "unknown", never a failure) and in a member nobody reads (accepted). The
// same strings with valid multi-byte text in place of those bytes are not
// refused for it.
func TestInvalidUTF8InEveryString(t *testing.T) {
	t.Parallel()
	type position struct {
		task  string
		field string // payload member, or envelope member when env is set
		env   bool
		array bool   // an element of an array of strings
		valid string // a value the field accepts, with QQQQ where the bytes go
	}
	positions := []position{
		{task: TaskTA, field: "symbol", valid: "VNQQQQ"},
		{task: TaskTA, field: "trade_date", valid: "2025-06-0QQQQ"},
		{task: TaskTA, field: "currency", valid: "USQQQQ"},
		{task: TaskTA, field: "source", valid: "hoQQQQse"},
		{task: TaskTA, field: "content_hash", valid: "QQQQabc"},
		{task: TaskTA, field: "first_seen_time", valid: "2025-06-01T19:00:00QQQQ"},
		{task: TaskSA, field: "url_canonical", valid: "https://cafef.vn/QQQQ"},
		{task: TaskSA, field: "source_domain", valid: "cafef.vQQQQ"},
		{task: TaskSA, field: "publisher_time", valid: "2025-06-01T19:00:00QQQQ"},
		{task: TaskSA, field: "first_seen_time", valid: "2025-06-01T19:30:00QQQQ"},
		{task: TaskSA, field: "text_normalized", valid: strings.Repeat("ệ", 120) + "QQQQ"},
		{task: TaskSA, field: "content_hash", valid: "abcQQQQ"},
		{task: TaskSA, field: "title", valid: "Tin QQQQ"},
		{task: TaskSA, field: "author", valid: "QQQQ"},
		{task: TaskSA, field: "symbols", array: true, valid: "VNQQQQ"},
		{task: TaskSA, field: "topic_tags", array: true, valid: "thi-QQQQ"},
		{task: TaskSA, field: "language", valid: "vQQQQ"},
		{task: TaskSA, field: "not_a_field", valid: "xQQQQ"},
		{task: TaskTA, field: "task_type", env: true, valid: "ta.QQQQbar"},
		{task: TaskSA, field: "task_type", env: true, valid: "sa.QQQQarticle"},
		{task: TaskTA, field: "task_id", env: true, valid: "t-QQQQ"},
		{task: TaskSA, field: "first_seen", env: true, valid: "2025-06-01T19:30:00QQQQ"},
	}
	invalid := []string{"\x80", "\xbf", "\xc3", "\xe1\xbb", "\xf0\x9f\x98", "\xed\xa0\x80", "\xc0\xaf", "\xe0\x80\xaf",
		"\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "é\xffệ"}
	for _, p := range positions {
		stripped := strings.Replace(p.valid, "QQQQ", "", 1)
		for _, value := range []string{"QQQQ" + stripped, p.valid, stripped + "QQQQ"} {
			for _, bad := range invalid {
				rec := withText(t, p.task, p.field, p.env, p.array, value, bad)
				row, err := process(rec, time.Time{})
				switch p.field {
				case "language":
					if err != nil || *row.SA.Language != LanguageUnknown {
						t.Errorf("%s: %v, row %+v; want the row with language unknown", rec, err, row.SA)
					}
				case "not_a_field":
					if err != nil {
						t.Errorf("%s: %v; want the row", rec, err)
					}
				default:
					c := stages.Classify(err)
					if c == nil || c.Kind != stages.KindDeadLetter || c.Reason != stages.ReasonDecodeError || c.Rule != "" {
						t.Errorf("%s: %+v; want decode_error without a rule", rec, c)
					}
				}
			}
		}
		// Valid multi-byte text in the same place is not refused as text
		// (the value may break a rule, as a symbol with "ệ" does).
		rec := withText(t, p.task, p.field, p.env, p.array, p.valid, "ệ😀")
		if _, err := process(rec, time.Time{}); err != nil && strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("%s: %v", rec, err)
		}
	}
}

// withText returns a valid envelope of task whose string field (or element
// of array field, or envelope member when env is set) holds value with
// QQQQ replaced by the raw bytes ins (which json.Marshal would repair).
func withText(t *testing.T, task, field string, env, array bool, value, ins string) []byte {
	t.Helper()
	base := taBase()
	if task == TaskSA {
		base = saBase()
	}
	var over, extra map[string]any
	switch {
	case field == "task_type":
		b := strings.Replace(string(envelope(t, task, base, nil, nil)), `"task_type":"`+task+`"`, `"task_type":"`+value+`"`, 1)
		return []byte(strings.Replace(b, "QQQQ", ins, 1))
	case env:
		extra = map[string]any{field: value}
	case array:
		over = map[string]any{field: []string{value}}
	default:
		over = map[string]any{field: value}
	}
	return []byte(strings.Replace(string(envelope(t, task, base, over, extra)), "QQQQ", ins, 1))
}
