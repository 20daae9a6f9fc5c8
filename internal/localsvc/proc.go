package localsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// ErrNotFound is wrapped by the error of a Start function when the server's
// binaries are not installed.
var ErrNotFound = errors.New("not found")

const (
	// startAttempts is how often a server is started on a new free port
	// before giving up; a retry covers the window in which another process
	// can take the port between freePort and the server's bind.
	startAttempts = 3
	// readyTimeout bounds how long a server may take to answer.
	readyTimeout = 30 * time.Second
	// checkTimeout bounds one readiness check.
	checkTimeout = 2 * time.Second
	// pollInterval is the pause between readiness checks.
	pollInterval = 100 * time.Millisecond
	// stopTimeout bounds a graceful stop before the process is killed.
	stopTimeout = 10 * time.Second
	// tailSize is how much output is kept for Output and errors.
	tailSize = 64 << 10
)

// common is what every server's options share.
type common struct {
	dir  string
	port int
	log  io.Writer
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func localAddr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// tailBuffer keeps the last max bytes written to it and copies every write
// to also (when set), ignoring also's errors. Safe for concurrent use.
type tailBuffer struct {
	mu   sync.Mutex
	buf  []byte
	max  int
	also io.Writer
}

func newTail(also io.Writer) *tailBuffer { return &tailBuffer{max: tailSize, also: also} }

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.mu.Unlock()
	if b.also != nil {
		_, _ = b.also.Write(p)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(bytes.TrimSpace(b.buf))
}

// proc is a running server process.
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

// setup configures cmd (made from spec.path and spec.args) to run as spec
// says, writing its output to out.
func (spec procSpec) setup(cmd *exec.Cmd, out io.Writer) *exec.Cmd {
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.Dir = spec.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr(spec.user)
	return cmd
}

// run runs spec to completion (initdb), bounded by ctx, with its output
// going to log and, on failure, into the error.
func (spec procSpec) run(ctx context.Context, log io.Writer) error {
	out := newTail(log)
	if err := spec.setup(exec.CommandContext(ctx, spec.path, spec.args...), out).Run(); err != nil {
		return fmt.Errorf("%s: %w; output:\n%s", spec.name, err, out)
	}
	return nil
}

// startProc starts spec in the background with its output going to log.
func startProc(spec procSpec, log io.Writer) (*proc, error) {
	out := newTail(log)
	cmd := spec.setup(exec.Command(spec.path, spec.args...), out)
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

// waitReady polls ready until it returns nil, the process exits, ctx ends
// or readyTimeout passes.
func (p *proc) waitReady(ctx context.Context, ready func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, checkTimeout)
		err := ready(cctx)
		ccancel()
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready (%v): last check: %w", p.name, p.err, err)
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (timeout %s): %w; last check: %w", p.name, readyTimeout, ctx.Err(), err)
		case <-time.After(pollInterval):
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

// server is a started server: its process and the directory to remove
// after it. Its methods are safe for concurrent use.
type server struct {
	p       *proc
	tempDir string // removed by stop; empty when the caller owns the directory
	unlock  func() // releases tempDir's lock (see lockTempDir) in stop; may be nil

	once    sync.Once
	stopErr error
}

// stop ends the process and removes tempDir, once; see the package doc.
func (s *server) stop() error {
	s.once.Do(func() {
		var errs []error
		if s.p.exited() {
			errs = append(errs, fmt.Errorf("%s had exited before Stop (%v); output:\n%s", s.p.name, s.p.err, s.p.out))
		} else if err := s.p.terminate(); err != nil {
			errs = append(errs, err)
		}
		if s.tempDir != "" {
			if err := os.RemoveAll(s.tempDir); err != nil {
				errs = append(errs, fmt.Errorf("remove %s: %w", s.tempDir, err))
			}
		}
		if s.unlock != nil {
			s.unlock()
		}
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// output returns the tail of the server's output.
func (s *server) output() string { return s.p.out.String() }

// launch is how every server starts; see launch.
type launch struct {
	name    string  // for messages, e.g. "postgres"
	pattern string  // os.MkdirTemp pattern of a temporary directory
	user    *osUser // run as this user (nil: the current user)
	// prepare, when set, runs in the directory before the server starts
	// (initdb).
	prepare func(ctx context.Context, dir string) error
	// proc builds the server process for a directory and a port.
	proc func(dir string, port int) procSpec
	// ready reports nil once the server on port serves requests.
	ready func(ctx context.Context, port int) error
}

// start prepares the server's directory (see serverDir), runs prepare, and
// starts the server on c.port or (when zero) on a free port, retried up to
// startAttempts times, until ready answers. On failure the error carries
// the server's output, no process is left running and a temporary directory
// is removed.
//
// A temporary directory stays locked (lockTempDir) while the server runs;
// before making one, start removes the directories of the same pattern that
// a process which died without Stop left behind (removeStaleTempDirs).
func (l launch) start(ctx context.Context, c common) (*server, int, error) {
	if c.dir == "" {
		removeStaleTempDirs(tempParent(l.user), l.pattern)
	}
	dir, temp, err := serverDir(c.dir, l.pattern, l.user)
	if err != nil {
		return nil, 0, err
	}
	s := &server{}
	if temp {
		s.tempDir = dir
		// Best effort: without the lock (a file system without flock)
		// the server runs all the same, and a directory it leaves behind
		// is not recognised.
		s.unlock, _ = lockTempDir(dir)
	}
	var port int
	s.p, port, err = l.startIn(ctx, c, dir)
	if err != nil {
		if temp {
			err = errors.Join(err, os.RemoveAll(dir))
			if s.unlock != nil {
				s.unlock()
			}
		}
		return nil, 0, err
	}
	return s, port, nil
}

func (l launch) startIn(ctx context.Context, c common, dir string) (*proc, int, error) {
	if l.prepare != nil {
		if err := l.prepare(ctx, dir); err != nil {
			return nil, 0, err
		}
	}
	var errs []error
	for range startAttempts {
		port := c.port
		if port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return nil, 0, err
			}
		}
		spec := l.proc(dir, port)
		spec.name, spec.dir, spec.user = l.name, dir, l.user
		p, err := startProc(spec, c.log)
		if err != nil {
			return nil, 0, err
		}
		err = p.waitReady(ctx, func(ctx context.Context) error { return l.ready(ctx, port) })
		if err == nil {
			return p, port, nil
		}
		crashed := p.exited() // e.g. the port was taken meanwhile: retry
		_ = p.terminate()
		errs = append(errs, fmt.Errorf("port %d: %w; output:\n%s", port, err, p.out))
		if !crashed || c.port != 0 || ctx.Err() != nil {
			break
		}
	}
	return nil, 0, fmt.Errorf("start %s: %w", l.name, errors.Join(errs...))
}
