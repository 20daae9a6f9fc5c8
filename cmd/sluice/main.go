// Command sluice runs sluice pipelines and their operational commands.
//
// Configuration comes from the environment (KAFKA_BROKERS, DATABASE_URL,
// REDIS_URL, S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, S3_BUCKET,
// OBJECT_STORE_DIR and the KAFKA_SASL_* / KAFKA_TLS* settings) and is
// overridden by flags. Errors print as one line on stderr with a non-zero exit.
//
// SIGINT or SIGTERM cancels the running command, which shuts down gracefully
// (sluice run: finishes in-flight batches, commits, leaves its groups) and
// exits 0. A second signal, or a shutdown that takes longer than
// shutdownGrace, ends the process at once with a non-zero status.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// shutdownGrace bounds a graceful shutdown after the first signal (the
// default termination grace period of Kubernetes).
const shutdownGrace = 30 * time.Second

func main() {
	ctx, stop := signalContext(context.Background(), shutdownGrace, os.Stderr, os.Exit, os.Interrupt, syscall.SIGTERM)
	err := execute(ctx, newProcessRootCmd())
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice: %v\n", err)
		os.Exit(1)
	}
}

// signalContext returns a context cancelled by the first of sigs. After it,
// a second signal calls exit(128+signal number), and a shutdown still
// running after grace calls exit(1), each with one line on stderr. stop
// releases the signals (they get their default action again) and cancels
// the context; call it once the command returned.
//
// signal.NotifyContext alone kept catching the signals after the first one,
// so a second Ctrl-C did nothing and a shutdown that hung needed SIGKILL.
func signalContext(parent context.Context, grace time.Duration, stderr io.Writer, exit func(int), sigs ...os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		var first os.Signal
		select {
		case first = <-ch:
		case <-done:
			return
		}
		fmt.Fprintf(stderr, "sluice: %v: shutting down (at most %v; repeat the signal to exit at once)\n", first, grace)
		cancel()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case s := <-ch:
			fmt.Fprintf(stderr, "sluice: %v again: exiting without finishing the shutdown\n", s)
			exit(signalExitCode(s))
		case <-t.C:
			fmt.Fprintf(stderr, "sluice: shutdown did not finish within %v: exiting\n", grace)
			exit(1)
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			cancel()
		})
	}
}

// signalExitCode is the shell's status of a process killed by s: 128+s.
func signalExitCode(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

// execute runs the command tree and returns its error on one line: joined
// errors and some driver errors span several lines, and the CLI promises a
// one-line error for every failure.
func execute(ctx context.Context, root *cobra.Command) error {
	err := root.ExecuteContext(ctx)
	if err == nil || !strings.Contains(err.Error(), "\n") {
		return err
	}
	return lineErr{err}
}

// lineErr prints its wrapped error with its lines trimmed and joined by "; ".
type lineErr struct{ err error }

func (e lineErr) Error() string {
	var parts []string
	for _, l := range strings.Split(e.err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

func (e lineErr) Unwrap() error { return e.err }
