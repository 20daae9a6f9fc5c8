package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// demoChildArgsEnv carries the arguments of a sluice process run by this
// test binary (TestDemoInterruptedExitsZero re-executes itself as sluice).
const demoChildArgsEnv = "SLUICE_TEST_DEMO_CHILD_ARGS"

// Ctrl-C in the middle of a demo scenario used to end sluice demo (and so
// make demo) with status 1 and "demo interrupted during the silver
// scenario: context canceled". An interrupt at any point — while the local
// PostgreSQL starts, while the database is migrated, in the middle of a
// scenario — is now a clean stop: exit status 0, one line saying what was
// interrupted, and no panic or goroutine dump. The signal goes to the
// demo's whole process group, as a terminal's Ctrl-C does (the local
// PostgreSQL the demo starts has a group of its own: the demo stops it).
func TestDemoInterruptedExitsZero(t *testing.T) {
	if args := os.Getenv(demoChildArgsEnv); args != "" {
		os.Args = append([]string{"sluice"}, strings.Split(args, "\n")...)
		main() // exits 1 on an error
		os.Exit(0)
	}
	t.Parallel()
	pg := testkit.NewPostgres(t)
	// Every service embedded but the database; --brokers= and --redis-url=
	// override a stack's KAFKA_BROKERS/REDIS_URL, which must not be touched.
	base := []string{"demo", "--brokers=", "--redis-url=", "--s3-endpoint=", "--kafka-addr", "127.0.0.1:0", "--ops-addr", ""}
	cases := []struct {
		name string
		// at is the start of the stdout line after which the signal is sent.
		at   string
		args []string
		// during is what the interrupt line names.
		during string
	}{
		// No --database-url: the demo starts a local PostgreSQL (initdb,
		// then the server), and the signal arrives while it does.
		{"starting PostgreSQL", "starting a local PostgreSQL", []string{"--database-url="}, "startup"},
		{"migrating", "topics:", []string{"--database-url", pg.URL}, "startup"},
		// Enough records that producing and consuming them takes a while.
		{"silver scenario", "▶ silver", []string{"--database-url", pg.URL, "--records", "300000"}, "the silver scenario"},
		{"smap scenario", "▶ smap", []string{"--database-url", pg.URL, "--records", "10", "--smap-items", "20000"}, "the smap scenario"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.args[0] == "--database-url=" && !havePostgresBinaries() {
				t.Skip("no PostgreSQL binaries (initdb) for the demo to start")
			}
			args := append(append(append([]string{}, base...), "--object-store-dir", t.TempDir()), tc.args...)
			stdout, stderr, code := interruptDemo(t, args, tc.at)
			if code != 0 {
				t.Fatalf("exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			want := "demo interrupted during " + tc.during + ": everything it started is stopped"
			if strings.Count(stdout, "demo interrupted") != 1 || !strings.Contains(stdout, want) {
				t.Fatalf("stdout: want one line %q\n%s", want, stdout)
			}
			for _, bad := range []string{"panic", "goroutine ", "demo finished"} {
				if strings.Contains(stdout+stderr, bad) {
					t.Fatalf("output holds %q\nstdout:\n%s\nstderr:\n%s", bad, stdout, stderr)
				}
			}
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
			if !strings.Contains(stderr, "interrupt: shutting down") {
				t.Fatalf("stderr: no shutdown line\n%s", stderr)
			}
		})
	}
}

// havePostgresBinaries reports whether initdb is on PATH or in
// /usr/lib/postgresql/*/bin, where the demo looks for it.
func havePostgresBinaries() bool {
	if _, err := exec.LookPath("initdb"); err == nil {
		return true
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	return len(m) > 0
}

// interruptDemo runs this test binary as sluice with args in a process
// group of its own, sends SIGINT to the group once a stdout line starts
// with at, and returns the outputs and the exit status.
func interruptDemo(t *testing.T, args []string, at string) (stdout, stderr string, code int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestDemoInterruptedExitsZero$")
	cmd.Env = append(os.Environ(), demoChildArgsEnv+"="+strings.Join(args, "\n"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	// A hung child must not hang the test: killed after a bound far above
	// a clean stop (the demo's shutdown grace is 30 s).
	killer := time.AfterFunc(3*time.Minute, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	defer killer.Stop()
	var out strings.Builder
	sent := false
	r := bufio.NewReader(pipe)
	for {
		line, err := r.ReadString('\n')
		out.WriteString(line)
		if !sent && strings.HasPrefix(line, at) {
			if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil {
				t.Fatalf("signal: %v", err)
			}
			sent = true
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("read stdout: %v", err)
			}
			break
		}
	}
	werr := cmd.Wait()
	if !sent {
		t.Fatalf("no stdout line starting %q: the demo ended first (%v)\n%s\nstderr:\n%s", at, werr, out.String(), errBuf.String())
	}
	code = 0
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		code = ee.ExitCode()
	} else if werr != nil {
		t.Fatal(werr)
	}
	return out.String(), errBuf.String(), code
}
