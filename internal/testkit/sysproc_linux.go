//go:build linux

package testkit

import "syscall"

// sysProcAttr runs a server as u (nil: as the current user) and kills it
// when the test binary dies, so a crashed test leaves no server behind.
func sysProcAttr(u *osUser) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if u != nil {
		a.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}
	}
	return a
}
