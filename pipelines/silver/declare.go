package silver

import (
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// Name is the pipeline's name (sluice run silver).
const Name = "silver"

// StageName is the validating stage (dlq.stage of its dead letters).
const StageName = "silver/validate"

// Declare declares the silver pipeline. Its services are built with cfg,
// whose group and topics are replaced by the declared ones.
func Declare(cfg Config) pipelines.Spec {
	return pipelines.Spec{
		Name:  Name,
		Doc:   "validates bronze records into ta_silver / sa_silver, dead-letters the rest; SCRAPE_SLOW backlog flag",
		Needs: pipelines.Needs{DB: true},
		Consumers: []pipelines.Consumer{{
			Group:   Name,
			Input:   topics.BronzeRecords,
			Decoder: "Decode: the bronze envelope (ta.bar or sa.article)",
			Stage:   StageName + ": the 14 rules, the first failure wins; a row per valid record",
			Sink:    "NewSink: ta_silver / sa_silver upsert with the seed's merge, windowed under a backlog",
			DLQ:     topics.BronzeDLQ,
		}},
		// The backlog monitor publishes SCRAPE_SLOW.
		Outputs: []string{topics.ControlFlags},
		Build: func(env pipelines.Env, s pipelines.Spec, _ *pipelines.Resources) ([]pipelines.Service, error) {
			return Services(env, cfg.named(s, false))
		},
	}
}

// named sets the group and topics of c from s, silver's declaration (with
// a run's Naming applied); with keep, only those c leaves empty.
func (c Config) named(s pipelines.Spec, keep bool) Config {
	in := s.Consumers[0]
	pipelines.AssignNames(keep, map[*string]string{
		&c.Group: in.Group, &c.Topic: in.Input, &c.DLQTopic: in.DLQ, &c.FlagsTopic: s.Outputs[0],
	})
	return c
}
