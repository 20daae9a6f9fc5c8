// Command sluice runs sluice pipelines and their operational commands.
//
// Configuration comes from the environment (KAFKA_BROKERS, DATABASE_URL,
// REDIS_URL, S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, S3_BUCKET,
// OBJECT_STORE_DIR and the KAFKA_SASL_* / KAFKA_TLS* settings) and is
// overridden by flags. Errors print as one line on stderr with a non-zero exit.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := execute(ctx, newRootCmd()); err != nil {
		fmt.Fprintf(os.Stderr, "sluice: %v\n", err)
		os.Exit(1)
	}
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
