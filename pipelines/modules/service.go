package modules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/sinks/kafkasink"
	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/ratelimit"
	"github.com/sluicehq/sluice/stages/run"
)

// MirrorStageName is the mirror stage (dlq.stage of its dead letters).
const MirrorStageName = "modules/mirror"

// Services builds the modules pipeline's services: modules-refresh
// (modules.refresh → gate, lease, rate-limited upstream call, snapshot and
// analysis in PostgreSQL → modules.state) and modules-mirror
// (modules.state → ticker_data_modules). env.Kafka and env.DB are
// required, env.Redis too unless cfg.RateLimit.Disabled. When env.Ops is
// set, the modules API (MountAPI: assemble, refresh, status, jobs and the
// aliases) and cfg.Routes are mounted on it and both services' readiness
// is registered. The Kafka clients it builds are closed once every service
// has returned from Run (or by Services itself when it fails).
func Services(env pipelines.Env, cfg Config) ([]pipelines.Service, error) {
	return pipelines.ConstructServices(env, cfg, services)
}

func services(env pipelines.Env, cfg Config, r *pipelines.Resources) ([]pipelines.Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if env.DB == nil {
		return nil, errors.New("modules needs PostgreSQL: set DATABASE_URL")
	}
	if env.Logger == nil {
		env.Logger = slog.Default()
	}
	m, err := newMetrics(env.Registerer)
	if err != nil {
		return nil, fmt.Errorf("modules: metrics: %w", err)
	}
	refresh, err := newRefreshService(env, cfg, m, r)
	if err != nil {
		return nil, err
	}
	mirror, err := newMirrorService(env, cfg, m)
	if err != nil {
		return nil, err
	}
	svcs := []pipelines.Service{refresh, mirror}
	if env.Ops != nil {
		if err := MountAPI(env, AssembleConfig{RefreshTopic: cfg.RefreshTopic, Budget: cfg.AssembleBudget}, r); err != nil {
			return nil, err
		}
		for pattern, h := range cfg.Routes {
			env.Ops.Handle(pattern, h)
		}
		for _, s := range svcs {
			env.Ops.AddReadiness(s.Name(), s.Ready)
		}
	}
	return svcs, nil
}

// newRefreshService builds the modules-refresh runner.
func newRefreshService(env pipelines.Env, cfg Config, m *metrics, r *pipelines.Resources) (pipelines.Service, error) {
	if cfg.Catalog == nil {
		db := env.DB
		cfg.Catalog = func(ctx context.Context) (Catalog, error) { return LoadCatalog(ctx, db) }
	}
	states, err := newStateStore(cfg.StateTopic, m)
	if err != nil {
		return nil, err
	}
	var db DB = env.DB
	if cfg.wrapDB != nil {
		db = cfg.wrapDB(db)
	}
	rf := &refresher{cfg: cfg, db: db, states: states, m: m, log: env.Logger.With("pipeline", RefreshGroup)}
	rf.fetchF = rf.fetchUpstream
	if !cfg.RateLimit.Disabled {
		if env.Redis == nil {
			return nil, errors.New("modules: Redis is required for the upstream rate limiter (REDIS_URL), or disable it")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		lim, err := ratelimit.New(ctx, env.Redis, ratelimit.Config{
			Source: cfg.SourceName, Kind: "modules", Windows: cfg.RateLimit.Windows, KeyPrefix: cfg.RateLimit.KeyPrefix,
		}, env.Registerer)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("modules: %w", err)
		}
		// One budget for the whole upstream account, over all members.
		rf.fetchF = ratelimit.Stage(lim, func(stages.Msg[fetchReq]) (string, bool) { return "api", true }, cfg.RateLimit.Backoff, rf.fetchUpstream)
	}
	prod, err := kgo.NewClient(ProducerOpts(env.Kafka)...)
	if err != nil {
		return nil, fmt.Errorf("modules: producer: %w", err)
	}
	r.Add(prod.Close)
	rc := cfg.Runtime
	rc.Name, rc.Group, rc.Topics, rc.DLQTopic, rc.Retry = RefreshGroup, cfg.RefreshGroup, []string{cfg.RefreshTopic}, cfg.DLQTopic, cfg.Retry
	rc.Window = run.WindowConfig{}
	if rc.KeyConcurrency == 0 {
		rc.KeyConcurrency = RefreshKeyConcurrency
	}
	if rc.BatchMaxRecords == 0 {
		rc.BatchMaxRecords = RefreshBatchMaxRecords
	}
	if rc.BatchLinger == 0 {
		rc.BatchLinger = RefreshBatchLinger
	}
	runner, err := run.New(rc, DecodeRefresh, rf.stage, kafkasink.Records(prod),
		run.WithKafkaOpts(env.GroupKafka(rc.Group)...),
		run.WithRegisterer(env.Registerer),
		run.WithLogger(env.Logger),
		run.WithStageName(RefreshStageName),
		run.WithStores(states),
		run.WithBudget(env.Memory),
	)
	if err != nil {
		return nil, fmt.Errorf("modules: refresh runner: %w", err)
	}
	return runner, nil
}

// mirrorIn is a modules.state record as the mirror reads it: a state, or
// a tombstone (nil State), which the mirror ignores: the table keeps the
// key's last row.
type mirrorIn struct{ state *State }

func decodeMirror(key, value []byte) (mirrorIn, error) {
	if value == nil {
		return mirrorIn{}, nil
	}
	s, err := DecodeState(key, value)
	if err != nil {
		return mirrorIn{}, err
	}
	return mirrorIn{state: &s}, nil
}

func mirrorStage(_ context.Context, m stages.Msg[mirrorIn]) ([]State, error) {
	if m.Value.state == nil {
		return nil, nil
	}
	return []State{*m.Value.state}, nil
}

// mirrorSink writes states to ticker_data_modules (MirrorTable) and counts
// the states the fence refused (sluice_modules_fenced_total
// {where="mirror"}). It is a run.Merger: a coalescing window keeps per key
// the state with the greatest token.
type mirrorSink struct {
	sink  *pgsink.Sink[State]
	table pgsink.Table[State]
	m     *metrics
}

var _ run.Merger[State] = (*mirrorSink)(nil)

func (s *mirrorSink) MergeKey(st State) string    { return s.table.KeyOf(st) }
func (s *mirrorSink) Merge(old, next State) State { return s.table.Merge(old, next) }

// Write implements stages.Sink.
func (s *mirrorSink) Write(ctx context.Context, batch []State) error {
	keys := map[string]struct{}{}
	for _, st := range batch {
		keys[s.table.KeyOf(st)] = struct{}{}
	}
	n, err := s.sink.WriteCount(ctx, batch)
	if err == nil && int64(len(keys)) > n {
		s.m.fenced.WithLabelValues("mirror").Add(float64(int64(len(keys)) - n))
	}
	return err
}

// newMirrorService builds the modules-mirror runner.
func newMirrorService(env pipelines.Env, cfg Config, m *metrics) (pipelines.Service, error) {
	table := MirrorTable()
	ps, err := pgsink.New(env.DB, table, pgsink.WithRegisterer(env.Registerer, Name), pgsink.WithLogger(env.Logger))
	if err != nil {
		return nil, fmt.Errorf("modules: mirror sink: %w", err)
	}
	rc := cfg.Runtime
	rc.Name, rc.Group, rc.Topics, rc.DLQTopic = MirrorGroup, cfg.MirrorGroup, []string{cfg.StateTopic}, cfg.DLQTopic
	rc.StartOffset = "earliest"
	rc.KeyConcurrency = 0 // the refresh's: the mirror's stage does no I/O
	if rc.Window.MaxKeys == 0 {
		rc.Window = MirrorWindow()
	}
	if rc.BatchLinger == 0 {
		rc.BatchLinger = MirrorBatchLinger
	}
	runner, err := run.New(rc, decodeMirror, mirrorStage, stages.Sink[State](&mirrorSink{sink: ps, table: table, m: m}),
		run.WithKafkaOpts(env.GroupKafka(rc.Group)...),
		run.WithRegisterer(env.Registerer),
		run.WithLogger(env.Logger),
		run.WithStageName(MirrorStageName),
		run.WithBudget(env.Memory),
	)
	if err != nil {
		return nil, fmt.Errorf("modules: mirror runner: %w", err)
	}
	return runner, nil
}
