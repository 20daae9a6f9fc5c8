package main

import (
	"testing"
	"time"
)

// demo --records 0 used to be accepted and then wait the whole --timeout
// (5 minutes by default) for a silver group that had nothing to consume;
// --smap-items 0 or less silently became 300. Such values now fail before
// anything is started.
func TestDemoBadFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--records", "0"}, "invalid --records 0 (want ≥ 1)"},
		{[]string{"--records", "-3"}, "invalid --records -3 (want ≥ 1)"},
		{[]string{"--smap-items", "0"}, "invalid --smap-items 0 (want ≥ 1)"},
		{[]string{"--smap-items", "-5"}, "invalid --smap-items -5 (want ≥ 1)"},
		{[]string{"--timeout", "0s"}, "invalid --timeout 0s (want > 0)"},
	}
	for _, tc := range cases {
		start := time.Now()
		// Unreachable services: an attempt to connect would fail with
		// another message.
		args := append([]string{"demo", "--brokers", "127.0.0.1:1", "--database-url", "postgres://u@127.0.0.1:1/db",
			"--redis-url", "redis://127.0.0.1:1/0", "--ops-addr", ""}, tc.args...)
		_, err := runCLI(t, args...)
		singleLine(t, err, tc.want)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v: took %v to fail", tc.args, d)
		}
	}
}
