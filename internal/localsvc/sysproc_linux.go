//go:build linux

package localsvc

import "syscall"

// sysProcAttr runs a server as u (nil: as the current user) and kills it
// when the process that started it dies, so a crashed parent leaves no
// server behind. (Linux sends the signal when the spawning OS thread exits;
// Go only ends threads whose goroutine exits while locked with
// runtime.LockOSThread, so do not start servers from such a goroutine.)
func sysProcAttr(u *osUser) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if u != nil {
		a.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}
	}
	return a
}
