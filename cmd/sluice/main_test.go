package main

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// The first signal cancels the command's context; main used
// signal.NotifyContext, which kept catching the signal afterwards, so a
// second Ctrl-C did nothing and a hanging shutdown was never bounded. A
// second signal now exits at once with 128+signal, and a shutdown longer
// than the grace period exits 1.
func TestSignalContext(t *testing.T) {
	// SIGUSR1/SIGUSR2 stand in for SIGINT/SIGTERM: the test process may not
	// be interrupted. Each subtest uses its own signal, and the signal is
	// caught (registered) whenever the test sends it.
	type exitRec struct{ code chan int }
	newExit := func() (exitRec, func(int)) {
		r := exitRec{code: make(chan int, 2)}
		return r, func(c int) { r.code <- c }
	}
	send := func(t *testing.T, s syscall.Signal) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), s); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("second signal", func(t *testing.T) {
		var errOut testkit.Buffer
		rec, exit := newExit()
		ctx, stop := signalContext(context.Background(), time.Minute, &errOut, exit, syscall.SIGUSR1)
		defer stop()
		send(t, syscall.SIGUSR1)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("first signal did not cancel the context")
		}
		select {
		case c := <-rec.code:
			t.Fatalf("exit(%d) after the first signal", c)
		case <-time.After(200 * time.Millisecond):
		}
		send(t, syscall.SIGUSR1)
		select {
		case c := <-rec.code:
			if want := 128 + int(syscall.SIGUSR1); c != want {
				t.Fatalf("exit(%d), want %d", c, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("second signal did not exit; stderr:\n%s", errOut.String())
		}
		if out := errOut.String(); !strings.Contains(out, "shutting down") || !strings.Contains(out, "exiting without finishing") {
			t.Fatalf("stderr:\n%s", out)
		}
	})

	t.Run("grace elapsed", func(t *testing.T) {
		var errOut testkit.Buffer
		rec, exit := newExit()
		_, stop := signalContext(context.Background(), 300*time.Millisecond, &errOut, exit, syscall.SIGUSR2)
		defer stop()
		send(t, syscall.SIGUSR2)
		select {
		case c := <-rec.code:
			if c != 1 {
				t.Fatalf("exit(%d), want 1", c)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a shutdown longer than the grace period did not exit")
		}
		if out := errOut.String(); !strings.Contains(out, "shutdown did not finish within 300ms") {
			t.Fatalf("stderr:\n%s", out)
		}
	})

	t.Run("finished in time", func(t *testing.T) {
		var errOut testkit.Buffer
		rec, exit := newExit()
		ctx, stop := signalContext(context.Background(), 300*time.Millisecond, &errOut, exit, syscall.SIGUSR1)
		send(t, syscall.SIGUSR1)
		<-ctx.Done()
		stop() // the command returned within the grace period
		select {
		case c := <-rec.code:
			t.Fatalf("exit(%d) after a shutdown that finished in time", c)
		case <-time.After(600 * time.Millisecond):
		}
	})

	t.Run("no signal", func(t *testing.T) {
		rec, exit := newExit()
		ctx, stop := signalContext(context.Background(), time.Minute, &testkit.Buffer{}, exit, syscall.SIGUSR2)
		if ctx.Err() != nil {
			t.Fatal("context cancelled before any signal")
		}
		stop()
		stop() // idempotent
		if ctx.Err() == nil {
			t.Fatal("stop did not cancel the context")
		}
		select {
		case c := <-rec.code:
			t.Fatalf("exit(%d) without a signal", c)
		default:
		}
	})
}
