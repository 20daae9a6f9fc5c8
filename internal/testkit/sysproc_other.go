//go:build !linux

package testkit

import "syscall"

// sysProcAttr returns nil: running a server as another user is only
// implemented on Linux (testkit needs it only when tests run as root).
func sysProcAttr(*osUser) *syscall.SysProcAttr { return nil }
