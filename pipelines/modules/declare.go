package modules

import (
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// Name is the pipeline's name (sluice run modules).
const Name = "modules"

// The consumer groups (fixed), also the names of their runners in metrics
// and logs.
const (
	RefreshGroup = "modules-refresh"
	MirrorGroup  = "modules-mirror"
)

// Declare declares the modules pipeline. Its services are built with cfg,
// whose groups and topics are replaced by the declared ones.
func Declare(cfg Config) pipelines.Spec {
	return pipelines.Spec{
		Name:  Name,
		Doc:   "refreshes ticker × module data from the upstream (one owner per key, leased and fenced), analyses it, and mirrors the states into ticker_data_modules",
		Needs: pipelines.Needs{DB: true, Redis: true},
		Consumers: []pipelines.Consumer{{
			Group:   RefreshGroup,
			Input:   topics.ModulesRefresh,
			Decoder: "DecodeRefresh: a refresh request {ticker, module, force, reason, job_id?, requested_at, request_id}",
			Stage:   RefreshStageName + ": rules, re-keying, the freshness gate, a lease, a rate-limited upstream call, snapshot and analysis in PostgreSQL",
			Sink:    "re-keyed requests back to modules.refresh (the key's state is the runtime's state store, changelog modules.state)",
			DLQ:     topics.ModulesDLQ,
		}, {
			Group:   MirrorGroup,
			Input:   topics.ModulesState,
			Decoder: "DecodeState: a module state (tombstones ignored)",
			Stage:   MirrorStageName + ": the state as a row",
			Sink:    "ticker_data_modules upsert fenced by (state_epoch, state_version), windowed",
			DLQ:     topics.ModulesDLQ,
		}},
		// Module states: the refresh's state store changelog, co-partitioned
		// with the requests; the mirror reads it from the start.
		Stores: []string{topics.ModulesState},
		Build: func(env pipelines.Env, s pipelines.Spec, r *pipelines.Resources) ([]pipelines.Service, error) {
			return services(env, cfg.named(s, false), r)
		},
	}
}

// named sets the groups and topics of c from s, the modules declaration
// (with a run's Naming applied); with keep, only those c leaves empty.
func (c Config) named(s pipelines.Spec, keep bool) Config {
	refresh, mirror := s.Consumers[0], s.Consumers[1]
	pipelines.AssignNames(keep, map[*string]string{
		&c.RefreshGroup: refresh.Group, &c.RefreshTopic: refresh.Input, &c.DLQTopic: refresh.DLQ,
		&c.MirrorGroup: mirror.Group, &c.StateTopic: s.Stores[0],
	})
	return c
}
