package ticks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/sinks/kafkasink"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages/ratelimit"
	"github.com/sluicehq/sluice/stages/run"
)

// Worker is the ticks consumer-group member: it consumes the tasks topic,
// owns the job states of its partitions and writes segment files, job
// states, chained tasks and dead letters. It implements pipelines.Service.
type Worker struct {
	cfg    Config
	kopts  []kgo.Opt
	prod   *kgo.Client
	close  func() // closes prod, once
	w      *worker
	runner *run.Runner[taskIn, *kgo.Record]
}

// NewWorker builds the worker. env.Kafka and env.Objects are required;
// env.Redis too unless cfg.RateLimit.Disabled. Its metrics, the
// object-store ones included (sluice_objstore_*{pipeline="ticks"}), go to
// env.Registerer.
func NewWorker(env pipelines.Env, cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if env.Objects == nil {
		return nil, errors.New("ticks: an object store is required")
	}
	log := env.Logger
	if log == nil {
		log = slog.Default()
	}
	base := log // the runner adds its own "pipeline" attribute
	log = log.With("pipeline", "ticks")
	m, err := newMetrics(env.Registerer)
	if err != nil {
		return nil, fmt.Errorf("ticks: metrics: %w", err)
	}
	store, err := objstore.Instrument(env.Objects, env.Registerer, cfg.Runtime.Name)
	if err != nil {
		return nil, fmt.Errorf("ticks: %w", err)
	}
	var lim *ratelimit.Limiter
	if !cfg.RateLimit.Disabled {
		if env.Redis == nil {
			return nil, errors.New("ticks: Redis is required for the rate limiter (REDIS_URL), or disable it")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		lim, err = ratelimit.New(ctx, env.Redis, ratelimit.Config{
			Source: cfg.SourceName, Windows: cfg.RateLimit.Windows, KeyPrefix: cfg.RateLimit.KeyPrefix,
		}, env.Registerer)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("ticks: %w", err)
		}
	}
	w, err := newWorker(cfg, store, lim, m, log)
	if err != nil {
		return nil, fmt.Errorf("ticks: %w", err)
	}
	prod, err := kgo.NewClient(append(append([]kgo.Opt{}, env.Kafka...),
		// Chained tasks go to the partition of the task that chains them.
		kgo.RecordPartitioner(run.CoPartitioner(kgo.StickyKeyPartitioner(nil), cfg.TasksTopic)),
		kgo.ProducerLinger(0),
	)...)
	if err != nil {
		return nil, fmt.Errorf("ticks: producer: %w", err)
	}
	// The job states are the runtime's state store jobs: restored on
	// assignment, written after each batch's chained tasks (the jobs topic
	// must be co-partitioned with the tasks topic: Run checks it).
	runner, err := run.New(cfg.Runtime, decodeTaskIn, w.stage, kafkasink.Records(prod),
		run.WithKafkaOpts(env.GroupKafka(cfg.Runtime.Group)...),
		run.WithRegisterer(env.Registerer),
		run.WithLogger(base),
		run.WithStageName(StageName),
		run.WithStores(w.jobs),
		run.WithBudget(env.Memory),
	)
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("ticks: %w", err)
	}
	return &Worker{cfg: cfg, kopts: env.Kafka, prod: prod, close: sync.OnceFunc(prod.Close), w: w, runner: runner}, nil
}

// Name implements pipelines.Service.
func (w *Worker) Name() string { return "ticks" }

// Ready implements pipelines.Service: the member joined its group and
// restored the job states of its partitions.
func (w *Worker) Ready() bool { return w.runner.Ready() }

// Run runs the consumer until ctx is cancelled. It fails at once when the
// tasks and jobs topics are not co-partitioned.
func (w *Worker) Run(ctx context.Context) error {
	defer w.close()
	return w.runner.Run(ctx)
}

// Services builds the ticks pipeline: the worker, and the supervisor when
// cfg.Supervisor.Enabled. When env.Ops is set, the trigger and status API
// (POST /api/v1/ingest/trigger, GET /api/v1/ingest/jobs[/{job}]) is mounted
// on it and the worker's readiness is registered. The Kafka clients it
// builds (the worker's producer, the coordinator's client) are closed once
// every service has returned from Run; if Services fails (or panics, e.g.
// when the routes are already mounted on env.Ops) it closes them itself
// before returning.
func Services(env pipelines.Env, cfg Config) ([]pipelines.Service, error) {
	return pipelines.ConstructServices(env, cfg, services)
}

// services builds what Services returns, registering the clients on r.
func services(env pipelines.Env, cfg Config, r *pipelines.Resources) ([]pipelines.Service, error) {
	cfg = cfg.withDefaults()
	wk, err := NewWorker(env, cfg)
	if err != nil {
		return nil, err
	}
	r.Add(wk.close)
	// The supervisor's calls count with the worker's (same labels, shared
	// series).
	store, err := objstore.Instrument(env.Objects, env.Registerer, cfg.Runtime.Name)
	if err != nil {
		return nil, fmt.Errorf("ticks: supervisor store: %w", err)
	}
	cl, err := kgo.NewClient(env.Kafka...)
	if err != nil {
		return nil, fmt.Errorf("ticks: coordinator client: %w", err)
	}
	r.Add(cl.Close)
	coord := NewCoordinator(cl, env.Kafka, cfg)
	svcs := []pipelines.Service{wk}
	if cfg.Supervisor.Enabled {
		svcs = append(svcs, NewSupervisor(cfg, coord, store, env.Logger))
	}
	if env.Ops != nil {
		for pattern, h := range coord.Routes() {
			env.Ops.Handle(pattern, h)
		}
		for _, s := range svcs {
			env.Ops.AddReadiness(s.Name(), s.Ready)
		}
	}
	return svcs, nil
}

// Summary is the outcome of DemoScenario.
type Summary struct {
	Jobs     []JobState
	Ticks    int64
	Segments int
	Elapsed  time.Duration
}

// DemoScenario triggers one job per symbol for date and waits until every
// job is COMPLETED or FAILED (or ctx ends). The ticks services must be
// running against the same topics. It uses cfg.Source for trading hours,
// so it must be the source the worker uses.
func DemoScenario(ctx context.Context, env pipelines.Env, cfg Config, account, date string, symbols ...string) (Summary, error) {
	cfg = cfg.withDefaults()
	start := time.Now()
	cl, err := kgo.NewClient(env.Kafka...)
	if err != nil {
		return Summary{}, fmt.Errorf("demo client: %w", err)
	}
	defer cl.Close()
	coord := NewCoordinator(cl, env.Kafka, cfg)
	want := map[string]string{}
	for _, sym := range symbols {
		res, err := coord.Trigger(ctx, TriggerRequest{Symbol: sym, Date: date, AccountID: account})
		if err != nil {
			return Summary{}, err
		}
		want[res.JobKey] = res.JobInstanceID
	}
	for {
		jobs, err := coord.Jobs(ctx)
		if err != nil {
			return Summary{}, err
		}
		var sum Summary
		done := 0
		for _, j := range jobs {
			if inst, ok := want[j.JobKey]; ok && j.JobInstanceID == inst {
				sum.Jobs = append(sum.Jobs, j)
				if j.Status == StatusCompleted || j.Status == StatusFailed {
					done++
				}
				sum.Ticks += j.Ticks
				sum.Segments += j.Segments
			}
		}
		if done == len(want) {
			sum.Elapsed = time.Since(start)
			return sum, nil
		}
		select {
		case <-ctx.Done():
			return sum, fmt.Errorf("demo: %d of %d jobs finished: %w", done, len(want), ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}
