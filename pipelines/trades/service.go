package trades

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/sinks/kafkasink"
	"github.com/sluicehq/sluice/stages/run"
)

// importServices builds trades-import: the runner of trades.import with
// the import-state store, and, when env.Ops is set, the imports API
// (POST /api/v1/trades/imports, GET /api/v1/trades/imports/{import_id})
// and the runner's readiness. The Kafka clients it builds are registered
// on r.
func importServices(env pipelines.Env, cfg ImportConfig, r *pipelines.Resources) ([]pipelines.Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if env.DB == nil {
		return nil, errors.New("trades-import: PostgreSQL is required (DATABASE_URL)")
	}
	log := env.Logger
	if log == nil {
		log = slog.Default()
	}
	m, err := newImportMetrics(env.Registerer)
	if err != nil {
		return nil, fmt.Errorf("trades-import: metrics: %w", err)
	}
	states, err := newStateStore(cfg.StateTopic)
	if err != nil {
		return nil, fmt.Errorf("trades-import: %w", err)
	}
	im := &importer{cfg: cfg, db: pgImportDB{pool: env.DB}, states: states, brokers: cfg.adapters(), m: m,
		log: log.With("pipeline", Name, "service", ImportName)}
	prod, err := kgo.NewClient(append(append([]kgo.Opt{}, env.Kafka...),
		// Chained pages and rejected trades' pushes go to the partition of
		// the command that chains them (the user's).
		kgo.RecordPartitioner(run.CoPartitioner(kgo.StickyKeyPartitioner(nil), cfg.ImportTopic)),
		kgo.ProducerLinger(0),
	)...)
	if err != nil {
		return nil, fmt.Errorf("trades-import: producer: %w", err)
	}
	r.Add(prod.Close)
	runner, err := run.New(cfg.Runtime, rawValue, im.stage, kafkasink.Records(prod),
		run.WithKafkaOpts(env.GroupKafka(cfg.Group)...),
		run.WithRegisterer(env.Registerer),
		run.WithLogger(log),
		run.WithStageName(ImportName),
		run.WithStores(states),
		run.WithBudget(env.Memory),
	)
	if err != nil {
		return nil, fmt.Errorf("trades-import: %w", err)
	}
	if env.Ops != nil {
		cl, err := kgo.NewClient(env.Kafka...)
		if err != nil {
			return nil, fmt.Errorf("trades-import: API client: %w", err)
		}
		r.Add(cl.Close)
		for pattern, h := range NewImports(cl, env.Kafka, cfg).Routes() {
			env.Ops.Handle(pattern, h)
		}
		env.Ops.AddReadiness(runner.Name(), runner.Ready)
	}
	return []pipelines.Service{runner}, nil
}

// adapters returns the broker adapters by broker name: cfg.Adapters, and
// the defaults for the brokers it leaves out.
func (c ImportConfig) adapters() map[string]BrokerAdapter {
	out := map[string]BrokerAdapter{
		BrokerSynthetic: NewSynthetic(),
		BrokerCoinbase:  NewCoinbase(c.CoinbaseURL, nil),
		BrokerBinance:   NewBinance(c.BinanceURL, c.BinanceSymbols, nil),
	}
	for name, a := range c.Adapters {
		out[name] = a
	}
	return out
}

// ImportServices builds trades-import alone (see importServices) with cfg,
// whose empty group and topic names take the declared ones. The Kafka
// clients it builds are closed once its service has returned from Run.
func ImportServices(env pipelines.Env, cfg ImportConfig) ([]pipelines.Service, error) {
	return pipelines.ConstructServices(env, cfg, importServices)
}
