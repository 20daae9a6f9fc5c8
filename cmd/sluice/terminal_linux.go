package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// ownTerminal makes this process the foreground process group of its
// controlling terminal when it was started inside another process's
// foreground group — by make, as in `make demo` — so that Ctrl-C reaches
// only sluice. Otherwise make gets the same SIGINT, waits for the demo's
// clean stop and then exits 130 whatever the demo returned; now make sees
// the demo's own exit status. Started directly by a shell (sluice already
// leads its group) or without a terminal, it does nothing. While sluice
// owns the terminal, Ctrl-Z is ignored (a stopped sluice would leave make,
// and the shell waiting on it, hanging). The returned function gives the
// terminal back to the original group; call it once, before exiting.
func ownTerminal() (restore func()) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return func() {}
	}
	fd := int(tty.Fd())
	fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	pid, pgrp := unix.Getpid(), unix.Getpgrp()
	if err != nil || fg != pgrp || pgrp == pid {
		_ = tty.Close()
		return func() {}
	}
	// Setting the foreground group from a background group raises SIGTTOU.
	signal.Ignore(syscall.SIGTTOU, syscall.SIGTSTP)
	if err := unix.Setpgid(0, 0); err != nil {
		signal.Reset(syscall.SIGTTOU, syscall.SIGTSTP)
		_ = tty.Close()
		return func() {}
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pid); err != nil {
		_ = unix.Setpgid(0, pgrp)
		signal.Reset(syscall.SIGTTOU, syscall.SIGTSTP)
		_ = tty.Close()
		return func() {}
	}
	return func() {
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, fg)
		signal.Reset(syscall.SIGTTOU, syscall.SIGTSTP)
		_ = tty.Close()
	}
}
