package main

import (
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout returns a net.Dialer Control function that sets
// TCP_USER_TIMEOUT on TCP sockets (other networks are left alone).
func setUserTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		if network != "tcp" && network != "tcp4" && network != "tcp6" {
			return nil
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		}); err != nil {
			return fmt.Errorf("postgres dialer: %w", err)
		}
		if serr != nil {
			return fmt.Errorf("postgres dialer: set TCP_USER_TIMEOUT: %w", serr)
		}
		return nil
	}
}
