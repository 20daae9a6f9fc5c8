package testkit

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startAttempts is how often a local server is started on a new free port
// before giving up; a retry covers the window in which another process can
// take the port between freePort and the server's bind.
const startAttempts = 3

// readyTimeout bounds how long a local server may take to accept connections.
const readyTimeout = 30 * time.Second

// stopTimeout bounds a graceful stop before the process is killed.
const stopTimeout = 10 * time.Second

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tailBuffer keeps the last max bytes written to it. Safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(bytes.TrimSpace(b.buf))
}

// osUser is an OS account a local server runs as.
type osUser struct {
	name     string
	uid, gid uint32
}

// proc is a local server process started by a test.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, valid after done is closed
	stop syscall.Signal
}

// procSpec describes a server process to start.
type procSpec struct {
	name string         // for messages: "postgres", "redis-server", "minio"
	path string         // executable
	args []string       // arguments
	env  []string       // extra environment, appended to os.Environ()
	dir  string         // working directory
	user *osUser        // run as this user (nil: the current user)
	stop syscall.Signal // graceful stop signal (SIGTERM when zero)
}

// startProc starts spec. The process gets SIGKILL if the test binary dies
// (on Linux), so a crashed test leaves no server behind.
func startProc(spec procSpec) (*proc, error) {
	cmd := exec.Command(spec.path, spec.args...)
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.Dir = spec.dir
	out := &tailBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr(spec.user)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	p := &proc{name: spec.name, cmd: cmd, out: out, done: make(chan struct{}), stop: spec.stop}
	if p.stop == 0 {
		p.stop = syscall.SIGTERM
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReady polls ready every 100ms until it returns nil, the process exits,
// or readyTimeout passes.
func (p *proc) waitReady(ready func(ctx context.Context) error) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := ready(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready (%v): last check: %w", p.name, p.err, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w", p.name, readyTimeout, err)
		}
		select {
		case <-p.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// terminate stops the process gracefully, killing it after stopTimeout.
func (p *proc) terminate() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(p.stop); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s did not stop within %s and was killed", p.name, stopTimeout)
}

// startLocal starts a local server on a free port, retrying on a new port
// when the process fails to come up, and registers its stop (and a log dump
// when the test failed) on t's cleanup. start builds the process for a port;
// ready checks that it serves. Startup failures are returned with the
// server's output, never reported on t.
func startLocal(t testing.TB, name string, start func(port int) (*proc, error), ready func(ctx context.Context, port int) error) (*proc, int, error) {
	t.Helper()
	var errs []error
	for range startAttempts {
		port, err := freePort()
		if err != nil {
			return nil, 0, err
		}
		p, err := start(port)
		if err != nil {
			return nil, 0, err
		}
		err = p.waitReady(func(ctx context.Context) error { return ready(ctx, port) })
		if err == nil {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("testkit: %s output (tail):\n%s", name, p.out)
				}
				if err := p.terminate(); err != nil {
					t.Logf("testkit: stop %s: %v", name, err)
				}
			})
			return p, port, nil
		}
		crashed := p.exited() // e.g. the port was taken meanwhile: retry
		_ = p.terminate()
		errs = append(errs, fmt.Errorf("port %d: %w; output:\n%s", port, err, p.out))
		if !crashed {
			break
		}
	}
	return nil, 0, fmt.Errorf("start local %s: %w", name, errors.Join(errs...))
}

// sharedTempDir creates a fresh directory that a server running as another
// OS user can use: its parent is world-traversable (falling back to /tmp
// when $TMPDIR is not), it is owned by user when user is set, and it
// is removed on t's cleanup (registered before the server's stop, so it runs
// after it).
func sharedTempDir(t testing.TB, pattern string, user *osUser) (string, error) {
	t.Helper()
	parent := os.TempDir()
	if user != nil && !worldTraversable(parent) {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", fmt.Errorf("temp dir: %w", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("testkit: remove %s: %v", dir, err)
		}
	})
	if user != nil {
		if err := os.Chown(dir, int(user.uid), int(user.gid)); err != nil {
			return "", fmt.Errorf("chown %s: %w", dir, err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return "", fmt.Errorf("chmod %s: %w", dir, err)
		}
	}
	return dir, nil
}

// worldTraversable reports whether every directory from dir up to / can be
// searched by any user.
func worldTraversable(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// findBinary looks name up on PATH, then in dirs in order (each may be a
// glob, whose newest-looking match wins, so /usr/lib/postgresql/*/bin
// prefers the highest version). Symlinks are not resolved: some programs
// (redis-server) choose their behaviour by the name they are run as.
func findBinary(name string, dirs ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		matches, _ := filepath.Glob(d)
		// Shorter first, then lexical: "9.6" < "15" < "16", so the last
		// match is the newest numbered version.
		slices.SortFunc(matches, func(a, b string) int {
			return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
		})
		for j := len(matches) - 1; j >= 0; j-- {
			p := filepath.Join(matches[j], name)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%s %w on PATH", name, errNotFound)
}
