package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// With Redis unreachable the process prints exactly one line, its error:
// go-redis's own pool messages go to the debug log, not to stderr. The test
// re-runs its own binary as the sluice command (main, os.Exit included).
func TestUnreachableRedisIsOneLine(t *testing.T) {
	if args := os.Getenv("SLUICE_TEST_MAIN_ARGS"); args != "" {
		os.Args = append([]string{"sluice"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnreachableRedisIsOneLine$")
	cmd.Env = append(os.Environ(), "SLUICE_TEST_MAIN_ARGS=smap progress nosuchproject", "REDIS_URL=redis://127.0.0.1:1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1; output:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "sluice: ") || !strings.Contains(lines[0], "connection refused") {
		t.Fatalf("output has %d line(s), want the one error line:\n%s", len(lines), out)
	}
}
