//go:build !linux

package main

import (
	"syscall"
	"time"
)

// setUserTimeout is a no-op where TCP_USER_TIMEOUT does not exist; the
// keepalive settings still bound a dead idle connection.
func setUserTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
