// Package pipelines holds what every sluice pipeline is built from: the
// shared environment (connections, registry, logger, ops server) and the
// Service contract the CLI runs. One sub-package per pipeline (silver,
// ticks, smap, …) declares its topics → stages → sinks next to its business
// rules.
package pipelines

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/sinks/objstore"
)

// Env carries the shared resources a pipeline is built from. Fields a
// pipeline does not need may be nil; a constructor returns a clear error
// when one it needs is missing. Env is read-only after construction.
type Env struct {
	// Kafka holds the connection options (seed brokers, SASL, TLS) for every
	// client the pipeline creates.
	Kafka []kgo.Opt
	// DB is the PostgreSQL pool (DATABASE_URL).
	DB *pgxpool.Pool
	// Redis is the Redis client (REDIS_URL); pipelines needing another
	// logical DB derive a client with the same options.
	Redis *redis.Client
	// Objects is the object store (S3/MinIO or a local directory).
	Objects objstore.Store
	// Registerer receives every metric; Logger every log line.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Ops is the ops HTTP server; pipelines mount API routes and readiness
	// checks on it. May be nil in tests.
	Ops *opshttp.Server
}

// Service is one runnable unit of a pipeline (a consumer-group runner, a
// supervisor loop, a backlog monitor …).
type Service interface {
	// Name identifies the service in logs and readiness checks.
	Name() string
	// Run blocks until ctx is cancelled (returning nil) or a fatal error.
	Run(ctx context.Context) error
	// Ready reports whether the service is serving (for /readyz).
	Ready() bool
}
