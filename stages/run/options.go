package run

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Option configures optional runner knobs.
type Option func(*options)

type options struct {
	reg        prometheus.Registerer
	log        *slog.Logger
	kopts      []kgo.Opt
	onAssigned func(ctx context.Context, assigned map[string][]int32) error
	onRevoked  func(ctx context.Context, revoked map[string][]int32)
	stageName  string
	topicCheck time.Duration // period of watchTopics (default topicCheckInterval); set by tests
	lagEvery   time.Duration // period of watchLag (default lagInterval); set by tests

	// State stores and timers (see state.go, timer.go).
	stores     []StateStore
	timers     any           // timerSpec[Out] of WithTimers
	stateEvery time.Duration // WithStateFlushEvery (statecoalesce.go)

	budget *Budget // WithBudget (budget.go)

	offsets OffsetStore // WithOffsetStore (offsetstore.go)
}

// WithRegisterer registers the runner's metrics on reg (default: a private
// registry, i.e. metrics are kept but not exported).
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithKafkaOpts adds client options, typically the connection settings from
// kconf.Config.Opts (seed brokers, SASL, TLS). Group, topics, balancer and
// commit options are set by the runner and must not be passed here.
// kgo.FetchIsolationLevel(kgo.ReadCommitted()) may be: the runner then never
// sees records of aborted transactions, and Config.StartOffset "latest" and
// Config.StopAtEnd take a partition's last stable offset as its end. So may
// kgo.KeepControlRecords(): workers skip transaction markers (control
// records: never decoded, nothing produced) and commit their offsets with
// their batch, so that a group that consumed a partition up to a trailing
// marker commits the partition's end, not the marker's offset.
// The runner builds several clients of these options, some at once
// (partition restores, re-reads): give a compression built
// (kgo.WithCompressor(kgo.DefaultCompressor(...))), not as
// kgo.ProducerBatchCompression, whose codec list kgo.NewClient rewrites in
// place (a data race between those clients).
func WithKafkaOpts(opts ...kgo.Opt) Option {
	return func(o *options) { o.kopts = append(o.kopts, opts...) }
}

// WithAssignHook sets a function called with newly assigned partitions
// before their workers start. Its ctx carries the group generation of the
// assignment (see [AssignedGeneration]). The runner reports ready only
// after the hook returned; an error stops the runner. State kept per
// partition belongs in a [Store], which the runner restores itself.
func WithAssignHook(fn func(ctx context.Context, assigned map[string][]int32) error) Option {
	return func(o *options) { o.onAssigned = fn }
}

// WithStores gives the runner its state stores (see [Store]). A store
// belongs to one runner, whose input must be a single topic
// co-partitioned with the store's changelog (checked when Run starts). Not
// supported by the transactional runner.
func WithStores(stores ...StateStore) Option {
	return func(o *options) { o.stores = append(o.stores, stores...) }
}

// WithRevokeHook sets a function called after the workers of revoked
// partitions stopped and their offsets were committed.
func WithRevokeHook(fn func(ctx context.Context, revoked map[string][]int32)) Option {
	return func(o *options) { o.onRevoked = fn }
}

// WithStageName sets the dlq.stage header of records dead-lettered by the
// stage (default: the pipeline name). Decode failures carry
// "<name>/decode" and sink rejections "<name>/sink".
func WithStageName(name string) Option { return func(o *options) { o.stageName = name } }
