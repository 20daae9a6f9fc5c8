package testkit

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// RunChild is for a test package's TestMain: when the environment
// variable env is set (the process is a child started by StartChild), it
// calls child with its value and exits with child's result; otherwise it
// returns and TestMain runs the tests.
func RunChild(env string, child func(spec string) int) {
	if spec := os.Getenv(env); spec != "" {
		os.Exit(child(spec))
	}
}

// Child is a child process started by StartChild.
type Child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and its output is drained
	err  error         // Wait's result, set before done closes
}

// StartChild starts the test binary again as a child process, running no
// test, with spec (as JSON) in the environment variable env: the package's
// TestMain hands it to its child function (see RunChild). The child's
// output goes to the test's log. It is killed on cleanup if still
// running. spec may hold credentials: the child must not log it.
func StartChild(t testing.TB, env string, spec any) *Child {
	t.Helper()
	v, err := json.Marshal(spec)
	if err != nil {
		t.Fatalf("testkit: child spec: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(v))
	cmd.Stdout, cmd.Stderr = childLog{t}, childLog{t}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testkit: start child: %v", err)
	}
	c := &Child{cmd: cmd, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() { c.Kill(t) })
	return c
}

// Kill sends SIGKILL (unless the process already exited) and waits for it
// to exit: no shutdown path of the child runs.
func (c *Child) Kill(t testing.TB) {
	t.Helper()
	if c.Exited() {
		return
	}
	if err := c.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("testkit: kill child: %v", err)
	}
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Errorf("testkit: child %d did not exit within 10s of SIGKILL", c.cmd.Process.Pid)
	}
}

// Exited reports whether the process has exited.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Err returns how the process exited (exec.Cmd.Wait's error) once Exited
// reports true, nil before.
func (c *Child) Err() error {
	if !c.Exited() {
		return nil
	}
	return c.err
}

// childLog writes a child's output to the test's log, line by line.
type childLog struct{ t testing.TB }

func (w childLog) Write(p []byte) (int, error) {
	w.t.Logf("child: %s", strings.TrimSpace(string(p)))
	return len(p), nil
}
