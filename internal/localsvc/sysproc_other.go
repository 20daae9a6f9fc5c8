//go:build !linux

package localsvc

import "syscall"

// sysProcAttr returns nil: running a server as another user, and killing
// it with its parent, are only implemented on Linux.
func sysProcAttr(*osUser) *syscall.SysProcAttr { return nil }
