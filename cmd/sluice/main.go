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
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		// One line: some driver errors span several.
		msg := strings.Join(strings.Fields(err.Error()), " ")
		fmt.Fprintf(os.Stderr, "sluice: %s\n", msg)
		os.Exit(1)
	}
}
