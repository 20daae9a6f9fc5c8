package modules

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/stages"
)

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"b":1, "a":[true,false,null]}`, `{"a":[true,false,null],"b":1}`},
		{" {\n\t\"a\" : { \"d\":1,\"c\":2 } } ", `{"a":{"c":2,"d":1}}`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`[1, 1.0, 1e0, 10e-1, 1.000, -0, -0.0]`, `[1,1,1,1,1,0,0]`},
		{`[1.5, 1.50, 15e-1, 0.1, 1e21, 1.5e300]`, `[1.5,1.5,1.5,0.1,1e+21,1.5e+300]`},
		{`[1000000, 1e6, 9007199254740993, 12345678901234567890123]`, `[1000000,1000000,9007199254740993,12345678901234567890123]`},
		{`[1e400]`, `[1e400]`},
		{`"<a&b>\u00e9\u2028"`, "\"<a&b>é\\u2028\""},
		{`"\/"`, `"/"`},
	} {
		got, err := CanonicalJSON([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("CanonicalJSON(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1} {"b":2}`, `{"a":1} x`, `nul`} {
		if got, err := CanonicalJSON([]byte(bad)); err == nil {
			t.Errorf("CanonicalJSON(%q) = %s, want an error", bad, got)
		}
	}
}

func TestInputHash(t *testing.T) {
	t.Parallel()
	h, err := InputHash(ModuleOptionsFlow, "rules-1", []byte(`{"b": 1.0, "a": "x"}`))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(`options_flow|rules-1|{"a":"x","b":1}`))
	if h != hex.EncodeToString(sum[:]) {
		t.Errorf("hash %s is not sha256 of module|version|canonical JSON", h)
	}
	same, _ := InputHash(ModuleOptionsFlow, "rules-1", []byte(`{"a":"x","b":1}`))
	if same != h {
		t.Error("formatting changed the hash")
	}
	for name, other := range map[string][3]string{
		"module":  {ModuleDarkPool, "rules-1", `{"a":"x","b":1}`},
		"version": {ModuleOptionsFlow, "rules-2", `{"a":"x","b":1}`},
		"content": {ModuleOptionsFlow, "rules-1", `{"a":"x","b":2}`},
		// The separator keeps the parts apart.
		"split": {"options_flow|rules-1", "", `{"a":"x","b":1}`},
	} {
		if o, err := InputHash(other[0], other[1], []byte(other[2])); err != nil || o == h {
			t.Errorf("another %s hashes alike (%v)", name, err)
		}
	}

	// Size boundary: exactly 4 MiB is hashed, one byte more is refused.
	const frame = len(`""`)
	big := []byte(`"` + strings.Repeat("x", MaxPayloadBytes-frame) + `"`)
	if _, err := InputHash(ModuleDarkPool, "1", big); err != nil {
		t.Errorf("4 MiB payload: %v", err)
	}
	_, err = InputHash(ModuleDarkPool, "1", append(big, ' '))
	wantDeadLetter(t, err, stages.ReasonSanityFail, RuleSnapshotTooLarge)

	_, err = InputHash(ModuleDarkPool, "1", []byte(`<html>502 Bad Gateway</html>`))
	wantDeadLetter(t, err, stages.ReasonSanityFail, RuleUpstreamRejected)
}
