package trades

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// services builds the pipeline's three services from cfg, their groups and
// topics named by names (a catalog name → its name in this run), and, when
// env.Ops and env.Redis are set, mounts the sim's route on the ops server.
func services(env pipelines.Env, cfg Config, names func(string) string, r *pipelines.Resources) ([]pipelines.Service, error) {
	var all []pipelines.Service
	for _, build := range []func() ([]pipelines.Service, error){
		func() ([]pipelines.Service, error) { return importServices(env, cfg.Import.named(names, false), r) },
		func() ([]pipelines.Service, error) { return buildScore(env, cfg, names, r) },
		func() ([]pipelines.Service, error) { return buildDigest(env, cfg, names, r) },
	} {
		svcs, err := build()
		if err != nil {
			return nil, err
		}
		all = append(all, svcs...)
	}
	if env.Ops != nil && env.Redis != nil && env.DB != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		sim, err := NewSimFromEnv(ctx, env)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("trades: %w", err)
		}
		for pattern, h := range sim.Routes() {
			env.Ops.Handle(pattern, h)
		}
	}
	return all, nil
}

// named sets the group and topics of c from names; with keep, only those c
// leaves empty.
func (c ImportConfig) named(names func(string) string, keep bool) ImportConfig {
	pipelines.AssignNames(keep, map[*string]string{
		&c.Group: names(ImportName), &c.ImportTopic: names(topics.TradesImport), &c.StateTopic: names(topics.TradesImportState),
		&c.EventsTopic: names(topics.TradesEvents), &c.DLQTopic: names(topics.TradesDLQ),
	})
	return c
}
