package main

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
)

// buildEnvClient is buildEnv plus a Kafka client on env.Kafka. The returned
// function closes the client, then the environment; call it even when the
// error is not nil, as buildEnv's. The errors are buildEnv's and
// kgo.NewClient's, unwrapped.
func (g *globalConfig) buildEnvClient(ctx context.Context, n needs) (pipelines.Env, *kgo.Client, func(), error) {
	env, closeEnv, err := g.buildEnv(ctx, n)
	if err != nil {
		return env, nil, closeEnv, err
	}
	cl, err := kgo.NewClient(env.Kafka...)
	if err != nil {
		return env, nil, closeEnv, err
	}
	return env, cl, func() { cl.Close(); closeEnv() }, nil
}
