package trades

import (
	"slices"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// Name is the pipeline's name (sluice run trades).
const Name = "trades"

// ImportName is the trades-import service: its consumer group, runtime
// name and the dlq.stage of its dead letters.
const ImportName = "trades-import"

// consumerDecl is one consumer group of the pipeline: its declaration,
// the state topics it owns, the topics it produces and how its services
// are built from the renamed Spec (names maps a catalog topic or group to
// its name in this run).
type consumerDecl struct {
	consumer pipelines.Consumer
	stores   []string
	outputs  []string
	build    func(env pipelines.Env, cfg Config, names func(string) string, r *pipelines.Resources) ([]pipelines.Service, error)
}

// consumers lists the pipeline's consumer groups, in declaration order:
// adding a service is one line here.
func consumers() []consumerDecl {
	return []consumerDecl{
		importDecl(),
		scoreDecl(),
		digestDecl(),
	}
}

// Declare declares the trades pipeline. Its services are built with cfg,
// whose groups and topics are replaced by the declared ones.
func Declare(cfg Config) pipelines.Spec {
	decls := consumers()
	s := pipelines.Spec{
		Name:  Name,
		Doc:   "imports users' broker trades into Postgres (trades-import), scores them for behavioural biases (trades-score) and sums them up in weekly digests (trades-digest)",
		Needs: pipelines.Needs{DB: true, Objects: true},
	}
	var inputs []string
	for _, d := range decls {
		s.Consumers = append(s.Consumers, d.consumer)
		inputs = append(inputs, d.consumer.Input)
		for _, st := range d.stores {
			if !slices.Contains(s.Stores, st) {
				s.Stores = append(s.Stores, st)
			}
		}
	}
	for _, d := range decls {
		for _, o := range d.outputs {
			if !slices.Contains(inputs, o) && !slices.Contains(s.Outputs, o) {
				s.Outputs = append(s.Outputs, o)
			}
		}
	}
	declared := s // the catalog names, to map a run's renamed Spec back
	s.Build = func(env pipelines.Env, renamed pipelines.Spec, r *pipelines.Resources) ([]pipelines.Service, error) {
		names := declaredNames(declared, renamed)
		var all []pipelines.Service
		for _, d := range decls {
			svcs, err := d.build(env, cfg, names, r)
			if err != nil {
				return nil, err
			}
			all = append(all, svcs...)
		}
		return all, nil
	}
	return s
}

// declaredNames maps every group and topic of declared to its name in
// renamed (the same Spec with a run's Naming applied); a name renamed does
// not declare maps to itself.
func declaredNames(declared, renamed pipelines.Spec) func(string) string {
	m := map[string]string{}
	for i, c := range declared.Consumers {
		rc := renamed.Consumers[i]
		m[c.Group], m[c.Input], m[c.DLQ] = rc.Group, rc.Input, rc.DLQ
	}
	for i, st := range declared.Stores {
		m[st] = renamed.Stores[i]
	}
	for i, o := range declared.Outputs {
		m[o] = renamed.Outputs[i]
	}
	return func(n string) string {
		if v, ok := m[n]; ok {
			return v
		}
		return n
	}
}

// importDecl declares trades-import.
func importDecl() consumerDecl {
	return consumerDecl{
		consumer: pipelines.Consumer{
			Group:   ImportName,
			Input:   topics.TradesImport,
			Decoder: "none: the stage decodes the command (DecodeCommand: import, push or page), so that its failures carry dlq.stage trades-import",
			Stage:   ImportName + ": start a run, or fetch one page from the broker, validate its trades and upsert them into trades (one Postgres transaction)",
			Sink:    "trade.upserted, import.progress and import.completed/failed on trades.events; the next page on trades.import (the import state is the runtime's state store, changelog trades.import.state)",
			DLQ:     topics.TradesDLQ,
		},
		stores:  []string{topics.TradesImportState},
		outputs: []string{topics.TradesEvents},
		build: func(env pipelines.Env, cfg Config, names func(string) string, r *pipelines.Resources) ([]pipelines.Service, error) {
			return importServices(env, cfg.Import.named(names, false), r)
		},
	}
}

// named sets the group and topics of c from names (see declaredNames);
// with keep, only those c leaves empty.
func (c ImportConfig) named(names func(string) string, keep bool) ImportConfig {
	pipelines.AssignNames(keep, map[*string]string{
		&c.Group: names(ImportName), &c.ImportTopic: names(topics.TradesImport), &c.StateTopic: names(topics.TradesImportState),
		&c.EventsTopic: names(topics.TradesEvents), &c.DLQTopic: names(topics.TradesDLQ),
	})
	return c
}

// scoreDecl declares trades-score.
func scoreDecl() consumerDecl {
	return consumerDecl{
		consumer: pipelines.Consumer{
			Group:   ScoreName,
			Input:   topics.TradesEvents,
			Decoder: "decodeScoreIn: import.completed and score.request; other event types are skipped",
			Stage:   ScoreName + ": load the user's history, label the trades since the request's date, prepare coach.reflect",
			Sink:    "bias_tags in one transaction, then trade.scored (trades.bias) and coach.reflect, then reflected_at",
			DLQ:     topics.TradesDLQ,
		},
		outputs: []string{topics.TradesBias, topics.CoachReflect},
		build: func(env pipelines.Env, cfg Config, names func(string) string, r *pipelines.Resources) ([]pipelines.Service, error) {
			return buildScore(env, cfg, names, r)
		},
	}
}

// digestDecl declares trades-digest.
func digestDecl() consumerDecl {
	return consumerDecl{
		consumer: pipelines.Consumer{
			Group:   DigestName,
			Input:   topics.TradesBias,
			Decoder: "decodeDigestIn: trade.scored (rule trades.scored) and digest.request",
			Stage:   DigestName + ": contributions and window states in the store (trades.digest.state); a 10 s timer emits due windows",
			Sink:    "the digest object, the digests row (guarded by revision), then digest.ready",
			DLQ:     topics.TradesDLQ,
		},
		stores:  []string{topics.TradesDigestState},
		outputs: []string{topics.DigestReady},
		build: func(env pipelines.Env, cfg Config, names func(string) string, r *pipelines.Resources) ([]pipelines.Service, error) {
			return buildDigest(env, cfg, names, r)
		},
	}
}
