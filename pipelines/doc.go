// Package pipelines holds what every sluice pipeline is built from: the
// shared environment (connections, registry, logger, ops server), the
// Service contract the CLI runs, the Spec a pipeline declares itself with
// and the builder that owns what the services hold.
//
// One sub-package per pipeline (silver, ticks, smap, …) declares itself
// once, in its declare.go: name, doc line, consumer groups with their
// input topic, decoder, stage, sink and DLQ, state stores, outputs, the
// resources it needs, and Build. Topic names are catalog constants
// (package topics). Package registry lists the declarations; sluice run
// and sluice demo build them with Build, which applies the run's Naming
// (group and topic prefixes), and release what they hold with Set.Close.
//
// A pipeline's constructor registers every client it builds on the
// Resources it is given and closes nothing itself: the Resources are
// released when all its services have returned from Run, when building
// fails, or by Set.Close for services that never ran.
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
	"github.com/sluicehq/sluice/stages/run"
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
	// InstanceID, when not empty, makes the process's consumer-group
	// members static (KIP-345): see GroupKafka. It must be unique among the
	// processes of a group and the same across restarts of one (the pod
	// name of a StatefulSet).
	InstanceID string
	// Memory is the process's memory budget, shared by the runners of
	// every pipeline built on this Env (run.WithBudget; `sluice run
	// --memory-budget`). Nil: each runner derives a budget of its own.
	Memory *run.Budget
}

// GroupKafka returns the client options of a member of consumer group:
// Kafka, plus kgo.InstanceID("<InstanceID>-<group>") when InstanceID is
// set, so that each group of the process has its own instance id. A static
// member does not leave its group when it stops: restarted with the same id
// within the session timeout (45 s by default) it gets its partitions back
// without a rebalance; until then, or for good if it does not come back
// in time, they are not consumed.
func (e Env) GroupKafka(group string) []kgo.Opt {
	opts := append([]kgo.Opt{}, e.Kafka...)
	if e.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(e.InstanceID+"-"+group))
	}
	return opts
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
