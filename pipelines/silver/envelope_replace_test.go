package silver

import (
	"bytes"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// An Envelope whose Payload was replaced after Decode is validated as the
// new payload, as a hand-built Envelope of it is, also when the new payload
// has the old one's length and layout: a string that Decode found plain
// (no escape, valid UTF-8) may now hold an escape or bytes that are not
// UTF-8.
func TestReplacedPayloadIsParsed(t *testing.T) {
	t.Parallel()
	base := saBase()
	base["title"] = "abcd"
	value := envelope(t, TaskSA, base, nil, nil)
	v := NewValidator(WithClock(testClock))
	for _, title := range []string{"\"ab\xff\xfe\"", `"a\nb"`, `"a\"c"`, `"wxyz"`} {
		env, err := Decode(nil, value)
		if err != nil {
			t.Fatal(err)
		}
		replaced := bytes.Replace(bytes.Clone(env.Payload), []byte(`"abcd"`), []byte(title), 1)
		if len(replaced) != len(env.Payload) || bytes.Equal(replaced, env.Payload) {
			t.Fatalf("title %q: not a replacement of the same length", title)
		}
		env.Payload = replaced
		got, gotErr := v.Transform(env, time.Time{})
		want, wantErr := v.Transform(Envelope{TaskType: env.TaskType, Payload: replaced}, time.Time{})
		if g, w := stages.Classify(gotErr), stages.Classify(wantErr); (gotErr == nil) != (wantErr == nil) ||
			gotErr != nil && (g.Reason != w.Reason || g.Rule != w.Rule) {
			t.Errorf("title %q: replaced payload gives %v, hand-built envelope %v", title, gotErr, wantErr)
			continue
		}
		if gotErr != nil {
			continue
		}
		if d := sameRow(got, want); d != "" {
			t.Errorf("title %q: replaced payload's row differs in %s: %q, want %q", title, d, *got.SA.Title, *want.SA.Title)
		}
	}
}
