package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const ownTerminalChildEnv = "SLUICE_TEST_OWN_TERMINAL_CHILD"

// openPTY returns the master of a new pseudo-terminal and its slave's path.
func openPTY(t *testing.T) (*os.File, string) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	return m, fmt.Sprintf("/dev/pts/%d", n)
}

// Under make, Ctrl-C used to reach make too: make waited for the demo's
// clean stop, then exited 130. Here a shell stands for make (it leads the
// terminal's foreground group; the child is a member, as make's recipe
// is); the child takes the terminal, so ^C reaches only it, and the shell
// sees its exit status 0 and exits 0 itself.
func TestOwnTerminalCtrlCReachesOnlyTheCommand(t *testing.T) {
	if os.Getenv(ownTerminalChildEnv) == "1" {
		ownTerminalChild()
		return
	}
	m, slavePath := openPTY(t)
	slave, err := os.OpenFile(slavePath, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open %s: %v", slavePath, err)
	}
	defer slave.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `"$0" -test.run='^TestOwnTerminalCtrlCReachesOnlyTheCommand$'; echo "child exited $?"`, self)
	cmd.Env = append(os.Environ(), ownTerminalChildEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(m)
		for sc.Scan() {
			lines <- strings.TrimRight(sc.Text(), "\r")
		}
		close(lines)
	}()
	var seen []string
	wait := func(want string) {
		deadline := time.After(time.Minute) // a safety net, not a measured time
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("terminal closed before %q; saw %q", want, seen)
				}
				seen = append(seen, l)
				if strings.Contains(l, want) {
					return
				}
			case <-deadline:
				t.Fatalf("no %q on the terminal; saw %q", want, seen)
			}
		}
	}
	wait("child owns the terminal")
	if _, err := m.Write([]byte{3}); err != nil { // ^C
		t.Fatal(err)
	}
	wait("child exited 0")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the shell standing for make: %v (it got the SIGINT); terminal: %q", err, seen)
	}
}

// ownTerminalChild takes the terminal, reports it, and exits 0 on SIGINT
// after giving the terminal back.
func ownTerminalChild() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	restore := ownTerminal()
	fg, _ := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	if fg != unix.Getpid() {
		fmt.Println("child does not own the terminal")
		os.Exit(3)
	}
	fmt.Println("child owns the terminal")
	<-sig
	restore()
	os.Exit(0)
}
