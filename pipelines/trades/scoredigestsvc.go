package trades

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages/run"
	"github.com/sluicehq/sluice/topics"
)

// outputProducer returns a Kafka producer on env registered on r.
func outputProducer(env pipelines.Env, r *pipelines.Resources, who string) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, env.Kafka...), kgo.ProducerLinger(0))...)
	if err != nil {
		return nil, fmt.Errorf("%s: kafka producer: %w", who, err)
	}
	r.Add(cl.Close)
	return cl, nil
}

func envLogger(env pipelines.Env) *slog.Logger {
	if env.Logger == nil {
		return slog.Default()
	}
	return env.Logger
}

// buildScore builds trades-score with the run's names (see
// pipelines.Renames): env.DB (with the trades migration) is required; the AI
// coach is used when cfg.Score.Coach.BaseURL (or AI_BASE_URL through
// cfg.Getenv) is set.
func buildScore(env pipelines.Env, cfg Config, names func(string) string, r *pipelines.Resources) ([]pipelines.Service, error) {
	sc, _, err := scoreDigestEnv(cfg.Score, cfg.Digest, cfg.Getenv)
	if err != nil {
		return nil, err
	}
	sc = sc.withDefaults()
	sc.BiasTopic, sc.ReflectTopic = names(topics.TradesBias), names(topics.CoachReflect)
	if env.DB == nil {
		return nil, errors.New(ScoreName + " needs a PostgreSQL pool (DATABASE_URL)")
	}
	m, err := newScoreMetrics(env.Registerer)
	if err != nil {
		return nil, err
	}
	var coach *Coach
	if sc.Coach.Now == nil {
		sc.Coach.Now = sc.Now
	}
	if sc.Coach.BaseURL != "" {
		if coach, err = NewCoach(sc.Coach); err != nil {
			return nil, fmt.Errorf("%s: %w", ScoreName, err)
		}
	}
	prod, err := outputProducer(env, r, ScoreName)
	if err != nil {
		return nil, err
	}
	rc := sc.Runtime
	rc.Name, rc.Group, rc.Topics, rc.DLQTopic = ScoreName, names(ScoreName), []string{names(topics.TradesEvents)}, names(topics.TradesDLQ)
	st := &scorer{cfg: sc, db: env.DB, coach: coach, m: m}
	runner, err := run.New(rc, decodeScoreIn, st.stage, &scoreSink{cfg: sc, db: env.DB, prod: prod, m: m},
		run.WithKafkaOpts(env.GroupKafka(rc.Group)...), run.WithRegisterer(env.Registerer), run.WithLogger(envLogger(env)),
		run.WithStageName(ScoreName), run.WithBudget(env.Memory))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ScoreName, err)
	}
	if env.Ops != nil {
		env.Ops.AddReadiness(ScoreName, runner.Ready)
	}
	return []pipelines.Service{runner}, nil
}

// buildDigest builds trades-digest with the run's names (see
// pipelines.Renames): env.DB (with the trades migration) and env.Objects are
// required. When env.Ops is set, POST /api/v1/trades/digests is mounted on
// it (DigestsRoute).
func buildDigest(env pipelines.Env, cfg Config, names func(string) string, r *pipelines.Resources) ([]pipelines.Service, error) {
	_, dc, err := scoreDigestEnv(cfg.Score, cfg.Digest, cfg.Getenv)
	if err != nil {
		return nil, err
	}
	dc = dc.withDefaults()
	dc.StateTopic, dc.ReadyTopic = names(topics.TradesDigestState), names(topics.DigestReady)
	if env.DB == nil || env.Objects == nil {
		return nil, errors.New(DigestName + " needs a PostgreSQL pool (DATABASE_URL) and an object store")
	}
	store, err := NewDigestStore(dc.StateTopic)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DigestName, err)
	}
	d := &digester{cfg: dc, store: store, windows: map[int32]int{}, due: map[int32]*dueIndex{}}
	if d.m, err = newDigestMetrics(env.Registerer, d.windowCount); err != nil {
		return nil, err
	}
	objects, err := objstore.Instrument(env.Objects, env.Registerer, DigestName)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DigestName, err)
	}
	prod, err := outputProducer(env, r, DigestName)
	if err != nil {
		return nil, err
	}
	rc := dc.Runtime
	rc.Name, rc.Group, rc.Topics, rc.DLQTopic = DigestName, names(DigestName), []string{names(topics.TradesBias)}, names(topics.TradesDLQ)
	sink := &digestSink{cfg: dc, db: env.DB, objects: objects, prod: prod, kopts: env.Kafka, m: d.m}
	kopts, err := digestKafkaOpts(env.GroupKafka(rc.Group))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DigestName, err)
	}
	runner, err := run.New(rc, decodeDigestIn, d.stage, sink,
		run.WithKafkaOpts(kopts...), run.WithRegisterer(env.Registerer), run.WithLogger(envLogger(env)),
		run.WithStageName(DigestName), run.WithBudget(env.Memory), run.WithStores(store),
		run.WithTimers(dc.Tick, d.tick), run.WithRevokeHook(d.revoked), run.WithStateFlushEvery(dc.StateFlush))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DigestName, err)
	}
	if env.Ops != nil {
		env.Ops.AddReadiness(DigestName, runner.Ready)
		env.Ops.Handle(DigestsRoute, DigestsHandler(NewRequester(prod, names(topics.TradesEvents), names(topics.TradesBias)), dc.Now))
	}
	return []pipelines.Service{runner}, nil
}

// digestKafkaOpts returns base with the compression of the digest runner's
// client, which writes the digest store's changelog: zstd stores its
// contribution sets in about 20 % fewer bytes than kgo's default snappy
// (BenchmarkDigestChangelogBytes). The compressor is built here, once, and
// given built (kgo.WithCompressor) rather than as a codec preference
// (kgo.ProducerBatchCompression): kgo.NewClient rewrites that list in place,
// and the runner builds clients from its options concurrently.
func digestKafkaOpts(base []kgo.Opt) ([]kgo.Opt, error) {
	c, err := kgo.DefaultCompressor(kgo.ZstdCompression(), kgo.NoCompression())
	if err != nil {
		return nil, fmt.Errorf("zstd compressor: %w", err)
	}
	return append(base, kgo.WithCompressor(c)), nil
}
