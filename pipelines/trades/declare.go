package trades

import (
	"strings"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// Name is the pipeline's name (sluice run trades).
const Name = "trades"

// Config configures the trades pipeline's services. Group and topic names
// come from the declaration. With Getenv set, the settings left zero are
// read from the environment through it (AI_*, TRADES_DIGEST_*).
type Config struct {
	Score  ScoreConfig
	Digest DigestConfig
	Getenv func(string) string
}

// Declare declares the trades pipeline: trades-score (trades.events →
// bias_tags, trades.bias, coach.reflect) and trades-digest (trades.bias →
// digest objects, digests, digest.ready, its window store on
// trades.digest.state), sharing the DLQ trades.dlq.
func Declare(cfg Config) pipelines.Spec {
	return pipelines.Spec{
		Name:      Name,
		Doc:       "scores imported trades for behavioural biases (bias_tags, coach.reflect) and sums them up in weekly digests",
		Needs:     pipelines.Needs{DB: true, Objects: true},
		Consumers: []pipelines.Consumer{scoreConsumer(), digestConsumer()},
		Stores:    []string{topics.TradesDigestState},
		Outputs:   []string{topics.CoachReflect, topics.DigestReady},
		Build: func(env pipelines.Env, s pipelines.Spec, r *pipelines.Resources) ([]pipelines.Service, error) {
			return buildServices(env, cfg, s, r, buildScore, buildDigest)
		},
	}
}

func scoreConsumer() pipelines.Consumer {
	return pipelines.Consumer{
		Group:   ScoreName,
		Input:   topics.TradesEvents,
		Decoder: "decodeScoreIn: import.completed and score.request; other event types are skipped",
		Stage:   ScoreName + ": load the user's history, label the trades since the request's date, prepare coach.reflect",
		Sink:    "bias_tags in one transaction, then trade.scored (trades.bias) and coach.reflect, then reflected_at",
		DLQ:     topics.TradesDLQ,
	}
}

func digestConsumer() pipelines.Consumer {
	return pipelines.Consumer{
		Group:   DigestName,
		Input:   topics.TradesBias,
		Decoder: "decodeDigestIn: trade.scored (rule trades.scored) and digest.request",
		Stage:   DigestName + ": contributions and window states in the store (trades.digest.state); a 10 s timer emits due windows",
		Sink:    "the digest object, the digests row (guarded by revision), then digest.ready",
		DLQ:     topics.TradesDLQ,
	}
}

// builder builds one consumer's service from the declaration s (the run's
// names applied) on env.
type builder func(env pipelines.Env, cfg Config, s pipelines.Spec, r *pipelines.Resources) (pipelines.Service, error)

// buildServices reads the environment settings once and builds each
// consumer's service.
func buildServices(env pipelines.Env, cfg Config, s pipelines.Spec, r *pipelines.Resources, builders ...builder) ([]pipelines.Service, error) {
	var err error
	if cfg.Score, cfg.Digest, err = scoreDigestEnv(cfg.Score, cfg.Digest, cfg.Getenv); err != nil {
		return nil, err
	}
	out := make([]pipelines.Service, 0, len(builders))
	for _, b := range builders {
		svc, err := b(env, cfg, s, r)
		if err != nil {
			return nil, err
		}
		out = append(out, svc)
	}
	return out, nil
}

// consumerOf returns the consumer of s whose group is the declared group
// (with the run's group prefix).
func consumerOf(s pipelines.Spec, group string) pipelines.Consumer {
	for _, c := range s.Consumers {
		if strings.HasSuffix(c.Group, group) {
			return c
		}
	}
	return pipelines.Consumer{}
}

// topicOf returns the topic of ts that is the catalog topic t (with the
// run's topic prefix).
func topicOf(ts []string, t string) string {
	for _, x := range ts {
		if strings.HasSuffix(x, t) {
			return x
		}
	}
	return ""
}
