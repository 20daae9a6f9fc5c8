package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build info", nil, false, "sluice (no build information)"},
		{"go install of a tag", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.4.0"}},
			true, "sluice v0.4.0, commit unknown (built without VCS information), go1.26.0"},
		{"checkout with VCS", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "04ca0db1"}, {Key: "vcs.time", Value: "2026-11-26T07:00:00Z"}, {Key: "vcs.modified", Value: "false"}}},
			true, "sluice (devel), commit 04ca0db1 2026-11-26T07:00:00Z, go1.26.0"},
		{"dirty checkout", &debug.BuildInfo{GoVersion: "go1.26.0", Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "04ca0db1"}, {Key: "vcs.modified", Value: "true"}}},
			true, "sluice (devel), commit 04ca0db1+dirty, go1.26.0"},
	}
	for _, c := range cases {
		if got := versionText(c.bi, c.ok); got != c.want {
			t.Errorf("%s: versionText = %q, want %q", c.name, got, c.want)
		}
	}
}

// `sluice version` and `sluice --version` print the same line, the build
// information of the running binary.
func TestVersionCommandAndFlag(t *testing.T) {
	t.Parallel()
	want := buildVersion() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := runCLI(t, args...)
		if err != nil || out != want {
			t.Errorf("sluice %s = %q, %v; want %q", args[0], out, err, want)
		}
	}
}

// A binary built in the git checkout as `make build` builds it names the
// checkout's commit. It compiles the command (seconds with a warm build
// cache), so -short skips it.
func TestVersionOfBuiltBinaryNamesCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the sluice binary")
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git: the build records no commit")
	}
	head, err := exec.Command(git, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): the build records no commit", err)
	}
	top, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !fi.IsDir() {
		t.Skip("a git worktree (.git is a file): the go command records VCS information only in a checkout whose .git is a directory")
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	build := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false") // the flag must win over it, as in the Makefile
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("sluice --version: %v", err)
	}
	if want := "commit " + strings.TrimSpace(string(head)); !strings.Contains(string(out), want) {
		t.Fatalf("sluice --version = %q, want it to contain %q", out, want)
	}
}
