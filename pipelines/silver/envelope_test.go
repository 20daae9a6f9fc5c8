package silver

import (
	"fmt"
	"strings"
	"testing"
)

// TestDecodeLocatesEveryField: Decode locates each field by its JSON name,
// in the payload member only, whether the payload is indexed with the
// envelope or, for a hand-built Envelope, on its own; and the envelope
// members by theirs.
func TestDecodeLocatesEveryField(t *testing.T) {
	t.Parallel()
	var members []string
	for f := range numFields {
		members = append(members, fmt.Sprintf(`%q:%d`, fieldNames[f], 100+f))
	}
	// Decoys: the same names at the envelope's level and deeper in the payload.
	value := `{"task_type":"ta.bar","symbol":"TOP","task_id":"t1","payload":{"x":{"symbol":"DEEP"},` + strings.Join(members, ",") + `},"first_seen":null}`
	env, err := Decode(nil, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	if env.TaskType != TaskTA || env.TaskID != "t1" || !env.FirstSeen.IsZero() {
		t.Errorf("envelope = %+v", env)
	}
	hand := Envelope{TaskType: env.TaskType, Payload: env.Payload}
	for _, e := range []*Envelope{&env, &hand} {
		var p payload
		if err := p.index(e); err != nil {
			t.Fatal(err)
		}
		for f := range numFields {
			raw, ok := p.raw(f)
			if want := fmt.Sprint(100 + f); !ok || string(raw) != want {
				t.Errorf("field %s = %q (present %v), want %s", fieldNames[f], raw, ok, want)
			}
		}
	}
	for k, name := range envelopeMemberNames {
		if got := envelopeNames.Index([]byte(name)); got != k {
			t.Errorf("envelope member %s has index %d, want %d", name, got, k)
		}
	}
}
