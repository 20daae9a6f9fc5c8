package modules

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/stages"
)

func TestCheckTicker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"NVDA", "NVDA", true},
		{"nvda", "NVDA", true},
		{"A", "A", true},
		{"BRK.B", "BRK.B", true},
		{"brk-a", "BRK-A", true},
		{"ABCDEFGHIJ", "ABCDEFGHIJ", true}, // 10 characters
		{"A123456789", "A123456789", true},
		{"ABCDEFGHIJK", "", false}, // 11
		{"", "", false},
		{"1NVDA", "", false},
		{".NV", "", false},
		{"NV DA", "", false},
		{"NV_DA", "", false},
		{"NV:DA", "", false},
		{"ſ", "", false}, // strings.ToUpper would make it "S"
		{"ÉTÉ", "", false},
	} {
		got, err := CheckTicker(tc.in)
		if tc.ok {
			if err != nil || got != tc.want {
				t.Errorf("CheckTicker(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			continue
		}
		wantDeadLetter(t, err, stages.ReasonSanityFail, RuleTicker)
	}
}

func TestCheckModule(t *testing.T) {
	t.Parallel()
	max := "a" + strings.Repeat("b", 39) // 40 characters
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"options_flow", true},
		{"a", true},
		{"m2", true},
		{max, true},
		{max + "c", false},
		{"", false},
		{"Options_flow", false}, // module ids are not folded
		{"options-flow", false},
		{"_options", false},
		{"2fa", false},
	} {
		err := CheckModule(tc.in)
		if tc.ok {
			if err != nil {
				t.Errorf("CheckModule(%q) = %v", tc.in, err)
			}
			continue
		}
		wantDeadLetter(t, err, stages.ReasonSanityFail, RuleModule)
	}
}

func TestCheckKnownModule(t *testing.T) {
	t.Parallel()
	cat := testCatalog()
	m, err := CheckKnownModule(ModuleOptionsFlow, cat)
	if err != nil || m.ID != ModuleOptionsFlow || m.DataTTL != cat[ModuleOptionsFlow].DataTTL {
		t.Fatalf("options_flow = %+v, %v", m, err)
	}
	for _, module := range []string{"retired", "insider_trades"} {
		_, err := CheckKnownModule(module, cat)
		wantDeadLetter(t, err, stages.ReasonSanityFail, RuleUnknownModule)
	}
}

func TestCheckJobID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"0b1e4f8a-3c2d-4e5f-8a9b-0c1d2e3f4a5b", "0b1e4f8a-3c2d-4e5f-8a9b-0c1d2e3f4a5b"},
		{"0B1E4F8A-3C2D-4E5F-8A9B-0C1D2E3F4A5B", "0b1e4f8a-3c2d-4e5f-8a9b-0c1d2e3f4a5b"},
	} {
		if got, err := CheckJobID(tc.in); err != nil || got != tc.want {
			t.Errorf("CheckJobID(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		"0b1e4f8a3c2d4e5f8a9b0c1d2e3f4a5b",       // no hyphens
		"{0b1e4f8a-3c2d-4e5f-8a9b-0c1d2e3f4a5b}", // braces
		"urn:uuid:0b1e4f8a-3c2d-4e5f-8a9b-0c1d2e3f4a5b",
		"0b1e4f8a-3c2d-4e5f-8a9b-0c1d2e3f4a5",   // 35 characters
		"0b1e4f8a-3c2d-4e5f-8a9b-0c1d2e3f4a5bc", // 37
		"0b1e4f8a-3c2d-4e5f-8a9b-0c1d2e3f4a5g",
		"job-1",
	} {
		_, err := CheckJobID(in)
		wantDeadLetter(t, err, stages.ReasonSanityFail, RuleRequest)
	}
}

func TestCheckKey(t *testing.T) {
	t.Parallel()
	const want = "NVDA:options_flow"
	for _, tc := range []struct {
		key   string
		rekey bool
		ok    bool
	}{
		{"NVDA:options_flow", false, true},
		{"nvda:options_flow", true, true},
		{"Nvda:Options_Flow", true, true},
		{"NVDA:dark_pool", false, false},
		{"AAPL:options_flow", false, false},
		{"NVDA", false, false},
		{"", false, false},
		{"NVDA:options_flow ", false, false},
		{"NVDA:options_flow\u212a", false, false}, // Kelvin sign: folds to k outside ASCII only
	} {
		rekey, err := CheckKey(tc.key, want)
		if tc.ok {
			if err != nil || rekey != tc.rekey {
				t.Errorf("CheckKey(%q) = %v, %v; want rekey %v", tc.key, rekey, err, tc.rekey)
			}
			continue
		}
		wantDeadLetter(t, err, stages.ReasonSanityFail, RuleKey)
	}
	// A Kelvin sign where the key has a k is a mismatch, not a re-key.
	if _, err := CheckKey("NVDA:\u212aey", "NVDA:key"); err == nil {
		t.Error("Kelvin sign accepted as k")
	}
}

func TestCheckPayloadSize(t *testing.T) {
	t.Parallel()
	if err := CheckPayloadSize(MaxPayloadBytes); err != nil {
		t.Errorf("4 MiB: %v", err)
	}
	wantDeadLetter(t, CheckPayloadSize(MaxPayloadBytes+1), stages.ReasonSanityFail, RuleSnapshotTooLarge)
}

func TestFailureRules(t *testing.T) {
	t.Parallel()
	cause := errors.New("boom")
	wantDeadLetter(t, UpstreamRejected(cause), stages.ReasonSanityFail, RuleUpstreamRejected)
	wantDeadLetter(t, AnalyzerFailed(ModuleDarkPool, cause), stages.ReasonException, "modules.analyzer.dark_pool")
	c := stages.Classify(UpstreamFailed(cause))
	if c.Kind != stages.KindRetry || c.Rule != RuleUpstream || !errors.Is(c, cause) {
		t.Errorf("UpstreamFailed = %+v", c)
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("é", 40) // 80 bytes
	got := clip(s)
	if !strings.HasSuffix(got, "…") || len(got) > 64+len("…") || !strings.HasPrefix(s, strings.TrimSuffix(got, "…")) {
		t.Errorf("clip = %q", got)
	}
	if clip("short") != "short" {
		t.Error("clip changed a short string")
	}
}
