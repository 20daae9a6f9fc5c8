//go:build linux

package localsvc

import (
	"io"
	"syscall"
	"testing"
)

// A server runs in a process group of its own: a terminal's Ctrl-C (sent
// to the parent's group) reaches only the parent, which stops it. Sharing
// the group, an initdb killed by the same Ctrl-C failed the demo's start-up
// (exit 1) before the demo saw the interrupt.
func TestServerRunsInItsOwnProcessGroup(t *testing.T) {
	t.Parallel()
	p, err := startProc(procSpec{name: "sleep", path: "/bin/sleep", args: []string{"30"}}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}()
	pgid, err := syscall.Getpgid(p.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if pgid == syscall.Getpgrp() {
		t.Fatalf("server in the parent's process group %d", pgid)
	}
	if pgid != p.cmd.Process.Pid {
		t.Errorf("server's process group %d, want its own (%d)", pgid, p.cmd.Process.Pid)
	}
}
