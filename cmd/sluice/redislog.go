package main

import (
	"context"
	"fmt"
	"log/slog"
)

// goRedisLogger sends go-redis's own log lines (connection-pool dial
// retries and the like) to the command's logger at debug level, so that a
// failure is reported as the CLI's one error line and a pipeline's logs
// stay JSON. go-redis keeps its logger process-wide (redis.SetLogger); the
// root command sets it once its flags are parsed.
type goRedisLogger struct{ log *slog.Logger }

func (l goRedisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
