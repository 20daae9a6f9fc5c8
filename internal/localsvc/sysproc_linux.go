//go:build linux

package localsvc

import "syscall"

// sysProcAttr runs a server as u (nil: as the current user) and kills it
// when the process that started it dies, so a crashed parent leaves no
// server behind. (Linux sends the signal when the spawning OS thread exits;
// Go only ends threads whose goroutine exits while locked with
// runtime.LockOSThread, so do not start servers from such a goroutine.)
// It runs in a process group of its own: a terminal's Ctrl-C, sent to the
// parent's group, reaches only the parent, which stops what it started in
// its own order (an initdb killed by the same Ctrl-C would fail the
// parent's start-up before the parent saw the interrupt).
func sysProcAttr(u *osUser) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if u != nil {
		a.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}
	}
	return a
}
