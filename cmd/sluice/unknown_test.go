package main

import (
	"strings"
	"testing"
)

// Unknown commands used to be reported three ways: cobra's own multi-line
// "Did you mean this?" at the top level, "(see … --help)" below it. Every
// level now gives one line of one form, with cobra's suggestion when there
// is one, before any setting is checked (the bad --log-level is not
// reported).
func TestUnknownCommandHint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown command "bogus" for "sluice" (see sluice --help)`},
		{[]string{"lagg"}, `unknown command "lagg" for "sluice"; did you mean lag? (see sluice --help)`},
		{[]string{"dlq", "bogus"}, `unknown command "bogus" for "sluice dlq" (see sluice dlq --help)`},
		{[]string{"dlq", "inspct"}, `unknown command "inspct" for "sluice dlq"; did you mean inspect? (see sluice dlq --help)`},
		{[]string{"trades", "imprt"}, `unknown command "imprt" for "sluice trades"; did you mean import? (see sluice trades --help)`},
		{[]string{"--log-level", "bogus", "bogus"}, `unknown command "bogus" for "sluice" (see sluice --help)`},
	} {
		out, err := runCLI(t, tc.args...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
		if out != "" {
			t.Errorf("%v: printed %q besides the error", tc.args, out)
		}
	}
	out, err := runCLI(t)
	if err != nil || !strings.Contains(out, "Available Commands:") {
		t.Errorf("sluice without a command: %v, want the help:\n%s", err, out)
	}
}
