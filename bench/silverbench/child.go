package main

import (
	"os/exec"
	"syscall"
	"time"
)

// child is a benchmark process started by the harness (variant a's
// pipeline, a peer). Not safe for concurrent use.
type child struct {
	cmd *exec.Cmd
	// exited receives cmd.Wait's result once; whoever receives it calls
	// exitedWith.
	exited chan error
	done   bool
}

// startChild starts cmd and waits for it in the background.
func startChild(cmd *exec.Cmd) (*child, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, exited: make(chan error, 1)}
	go func() { c.exited <- cmd.Wait() }()
	return c, nil
}

// exitedWith records that the exit was received from c.exited, so that
// stop does not wait for it again.
func (c *child) exitedWith(err error) error {
	c.done = true
	return err
}

// stop sends SIGTERM and waits for the exit, killing the process after
// 30 s. It does nothing once the process is known to have exited.
func (c *child) stop() {
	if c.done {
		return
	}
	c.done = true
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}
