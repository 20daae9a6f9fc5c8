package smap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/progress"
	"github.com/sluicehq/sluice/stages/run"
)

// Service names (also the runtime pipeline names and dlq.stage values).
const (
	CollectorName = "smap-collector"
	AnalyticsName = "smap-analytics"
	ProgressName  = "smap-progress"
)

// minStateAttempts is the least number of attempts of a collector or
// progress-counter record (Config.Runtime.Retry.MaxAttempts is raised to
// it): with the runtime's default backoff (100ms doubling up to 10s) they
// span about four minutes, so a short Redis or object-store outage
// dead-letters no project.created (which would leave its project CRAWLING
// forever) and loses no count.
const minStateAttempts = 30

// ProgressRoute is the ops-HTTP route of the progress query.
const ProgressRoute = "GET /api/v1/projects/{id}/progress"

// StateClient returns a Redis client on cfg's state database (DB 1 by
// default): base itself when it is already on that database, otherwise a
// new client with base's options, which the caller closes with the
// returned function.
func StateClient(base *redis.Client, cfg Config) (*redis.Client, func() error) {
	cfg = cfg.withDefaults()
	o := base.Options()
	if o.DB == cfg.RedisDB {
		return base, func() error { return nil }
	}
	oc := *o
	oc.DB = cfg.RedisDB
	// base's options carry the push-notification processor base registered
	// its handlers on; a client sharing it fails to register its own (go-redis
	// logs "cannot overwrite existing handler" on every start).
	oc.PushNotificationProcessor = nil
	c := redis.NewClient(&oc)
	return c, c.Close
}

// NewTracker returns the progress tracker of smap on rdb (which must be on
// the state database; see StateClient).
func NewTracker(rdb *redis.Client, cfg Config) (*progress.Tracker, error) {
	cfg = cfg.withDefaults()
	return progress.New(rdb, progress.Config{Prefix: cfg.KeyPrefix, TTL: cfg.StateTTL, Now: cfg.Now})
}

// Services builds the three smap services on env:
//
//   - smap-collector consumes smap.project.created (group smap-collector),
//   - smap-analytics consumes smap.data.collected (group smap-analytics,
//     read_committed; concurrency = assigned partitions × group members),
//   - smap-progress consumes smap.analysis.finished (group smap-progress,
//     read_committed) and publishes smap.job.completed.
//
// env.DB (with the post_analytics migration applied), env.Redis and
// env.Objects are required. When env.Ops is set, the progress query is
// mounted on it at ProgressRoute (so call Services once per ops server).
// Metrics go to env.Registerer, the object-store calls of each service
// (sluice_objstore_*) with the service's name as their pipeline label. The
// clients the services own (the collector's and the progress counter's
// producers, the state database's Redis client) are closed once every service has returned from Run (each may
// run once), or at once when Services fails.
func Services(env pipelines.Env, cfg Config) ([]pipelines.Service, error) {
	return pipelines.ConstructServices(env, cfg, services)
}

// services builds what Services returns, registering the clients on r.
func services(env pipelines.Env, cfg Config, r *pipelines.Resources) ([]pipelines.Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var missing []error
	if env.DB == nil {
		missing = append(missing, errors.New("a PostgreSQL pool (DATABASE_URL)"))
	}
	if env.Redis == nil {
		missing = append(missing, errors.New("a Redis client (REDIS_URL)"))
	}
	if env.Objects == nil {
		missing = append(missing, errors.New("an object store"))
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("smap needs %w", errors.Join(missing...))
	}
	log := env.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("pipeline", "smap")
	m, err := newMetrics(env.Registerer)
	if err != nil {
		return nil, err
	}
	// Each service counts its object-store calls under its own pipeline
	// label, the one its runtime metrics carry.
	objects := map[string]objstore.Store{}
	for _, name := range []string{CollectorName, AnalyticsName, ProgressName} {
		if objects[name], err = objstore.Instrument(env.Objects, env.Registerer, name); err != nil {
			return nil, fmt.Errorf("smap: %w", err)
		}
	}
	rdb, closeRedis := StateClient(env.Redis, cfg)
	r.Add(func() { _ = closeRedis() })
	tr, err := NewTracker(rdb, cfg)
	if err != nil {
		return nil, err
	}
	producer := func() (*kgo.Client, error) {
		cl, err := kgo.NewClient(env.Kafka...)
		if err != nil {
			return nil, fmt.Errorf("smap: kafka producer: %w", err)
		}
		r.Add(cl.Close)
		return cl, nil
	}
	opts := func(name, group string) []run.Option {
		return []run.Option{
			run.WithKafkaOpts(env.GroupKafka(group)...), run.WithRegisterer(env.Registerer),
			run.WithLogger(env.Logger), run.WithStageName(name), run.WithBudget(env.Memory),
		}
	}

	// Collector.
	cprod, err := producer()
	if err != nil {
		return nil, err
	}
	comp := newCompleter(cfg, tr, cprod, objects[CollectorName], m, log)
	col := &collector{cfg: cfg, tr: tr, objects: objects[CollectorName], comp: comp, m: m, log: log.With("service", CollectorName)}
	crc := cfg.runConfig(CollectorName, cfg.CollectorGroup, cfg.ProjectCreatedTopic)
	// A dead-lettered project.created strands its project in CRAWLING (its
	// total is never sealed): ride out a short Redis or object-store outage
	// as the progress counter does.
	crc.Retry.MaxAttempts = max(crc.Retry.MaxAttempts, minStateAttempts)
	crun, err := run.New(crc,
		decodeProjectCreated, col.stage, announcer{topic: cfg.DataCollectedTopic}, opts(CollectorName, crc.Group)...)
	if err != nil {
		return nil, fmt.Errorf("smap collector: %w", err)
	}

	// Analytics.
	an := &analytics{cfg: cfg, objects: objects[AnalyticsName], m: m, log: log.With("service", AnalyticsName)}
	arc := cfg.runConfig(AnalyticsName, cfg.AnalyticsGroup, cfg.DataCollectedTopic)
	// data.collected is produced in the collector's commit transactions.
	arun, err := run.New(arc, decodeCollected, an.stage, &analyticsSink{db: env.DB, m: m}, committed(opts(AnalyticsName, arc.Group))...)
	if err != nil {
		return nil, fmt.Errorf("smap analytics: %w", err)
	}

	// Progress counter.
	pprod, err := producer()
	if err != nil {
		return nil, err
	}
	pcomp := newCompleter(cfg, tr, pprod, objects[ProgressName], m, log.With("service", ProgressName))
	prc := cfg.runConfig(ProgressName, cfg.ProgressGroup, cfg.AnalysisFinishedTopic)
	prc.Retry.MaxAttempts = max(prc.Retry.MaxAttempts, minStateAttempts)
	// analysis.finished is produced in the analytics runner's commit
	// transactions.
	prun, err := run.New(prc, decodeFinished, counterStage(cfg, tr, objects[ProgressName], m), pcomp.sink, committed(opts(ProgressName, prc.Group))...)
	if err != nil {
		return nil, fmt.Errorf("smap progress: %w", err)
	}

	if env.Ops != nil {
		env.Ops.Handle(ProgressRoute, ProgressHandler(tr, log))
	}
	return []pipelines.Service{crun, arun, prun}, nil
}

// committed makes a runner read committed, for an input another runner
// publishes in its commit transactions (run.Publisher): each event is seen
// once. The transaction markers are kept so that the group's commits (and
// its lag) reach a partition's end when it ends with one.
func committed(opts []run.Option) []run.Option {
	return append(opts, run.WithKafkaOpts(kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()))
}

func decodeFinished(_, value []byte) (Event[AnalysisFinished], error) {
	e, err := DecodeAnalysisFinished(value)
	if err != nil {
		return e, stages.DeadLetter(stages.ReasonDecodeError, "", err)
	}
	return e, nil
}

// counterStage counts each analysis.finished item once (errors included)
// and outputs a completion when the count decides it.
func counterStage(cfg Config, tr *progress.Tracker, objects objstore.Store, m *metrics) stages.Func[Event[AnalysisFinished], progress.Completion] {
	inner := progress.Stage(tr, func(msg stages.Msg[Event[AnalysisFinished]]) (progress.Item, error) {
		p := msg.Value.Payload
		return progress.Item{Job: p.ProjectID, ID: p.ItemID, Failed: p.Status == AnalysisError}, nil
	}, cfg.MissingStateWait)
	return func(ctx context.Context, msg stages.Msg[Event[AnalysisFinished]]) ([]progress.Completion, error) {
		cs, err := inner(ctx, msg)
		if errors.Is(err, progress.ErrInvalidID) {
			// The decoder refuses empty ids: the project id is the culprit.
			return nil, stages.DeadLetter(stages.ReasonSanityFail, RuleProjectID, err)
		}
		if errors.Is(err, progress.ErrMissing) {
			return missingState(ctx, objects, msg.Value.Payload.ProjectID, err)
		}
		if err != nil {
			return nil, err
		}
		status := msg.Value.Payload.Status
		if status != AnalysisError {
			status = AnalysisOK
		}
		m.counted.WithLabelValues(status).Inc()
		if len(cs) > 0 && cfg.afterDecision != nil {
			if err := cfg.afterDecision(ctx, cs[0]); err != nil {
				return nil, stages.Retry(err)
			}
		}
		return cs, nil
	}
}

// RuleUnknownProject is the dlq.rule of an analysis.finished event of a
// project the collector never saw (reason sanity_fail).
const RuleUnknownProject = "smap.unknown_project"

// missingState decides about an item whose project has no progress state
// (missing is the counter's retryable ErrMissing). The collector writes a
// project's meta object before it announces any item, so:
//   - no meta object (or an id the collector refuses): the project was
//     never collected and never will be — dead-letter at once instead of
//     blocking the partition through every retry;
//   - a meta object that records the completion: the project finished and
//     its state expired (a replay) — nothing left to count, drop it;
//   - otherwise Redis lost a live project's state: keep retrying, so that
//     rebuild-progress can restore it meanwhile (the documented path).
func missingState(ctx context.Context, objects objstore.Store, id string, missing error) ([]progress.Completion, error) {
	unknown := func(why string) error {
		return stages.DeadLetter(stages.ReasonSanityFail, RuleUnknownProject, fmt.Errorf("project %.80q has no progress state: %s", id, why))
	}
	if err := checkProjectID(id); err != nil {
		return nil, unknown(err.Error())
	}
	b, err := objects.Get(ctx, metaKey(id))
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return nil, unknown("the collector never saw it")
	case err != nil:
		return nil, missing // cannot tell: retry
	}
	var pm projectMeta
	if json.Unmarshal(b, &pm) == nil && !pm.CompletedAt.IsZero() {
		return nil, nil
	}
	return nil, missing
}
