package trades

import (
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// Name is the pipeline's name (sluice run trades).
const Name = "trades"

// ImportName is the trades-import service: its consumer group, runtime
// name and the dlq.stage of its dead letters.
const ImportName = "trades-import"

// Declare declares the trades pipeline. Its services are built with cfg,
// whose groups and topics are replaced by the declared ones.
func Declare(cfg Config) pipelines.Spec {
	return pipelines.Spec{
		Name:  Name,
		Doc:   "imports users' broker trades into Postgres (trades-import), scores them for behavioural biases (trades-score) and sums them up in weekly digests (trades-digest)",
		Needs: pipelines.Needs{DB: true, Redis: true, Objects: true},
		Consumers: []pipelines.Consumer{{
			Group:   ImportName,
			Input:   topics.TradesImport,
			Decoder: "none: the stage decodes the command (DecodeCommand: import, push or page), so that its failures carry dlq.stage trades-import",
			Stage:   ImportName + ": start a run, or fetch one page from the broker, validate its trades and upsert them into trades (one Postgres transaction)",
			Sink:    "trade.upserted, import.progress and import.completed/failed on trades.events; the next page on trades.import (the import state is the runtime's state store, changelog trades.import.state)",
			DLQ:     topics.TradesDLQ,
		}, {
			Group:   ScoreName,
			Input:   topics.TradesEvents,
			Decoder: "decodeScoreIn: import.completed and score.request; other event types are skipped",
			Stage:   ScoreName + ": load the user's history, label the trades since the request's date, prepare coach.reflect",
			Sink:    "bias_tags in one transaction, then trade.scored (trades.bias) and coach.reflect, then reflected_at",
			DLQ:     topics.TradesDLQ,
		}, {
			Group:   DigestName,
			Input:   topics.TradesBias,
			Decoder: "decodeDigestIn: trade.scored (rule trades.scored) and digest.request",
			Stage:   DigestName + ": contributions and window states in the store (trades.digest.state); a 10 s timer emits due windows",
			Sink:    "the digest object, the digests row (guarded by revision), then digest.ready",
			DLQ:     topics.TradesDLQ,
		}},
		// Import states and the digest window store: changelogs
		// co-partitioned with trades.import and trades.bias.
		Stores:  []string{topics.TradesImportState, topics.TradesDigestState},
		Outputs: []string{topics.CoachReflect, topics.DigestReady},
		Build: func(env pipelines.Env, s pipelines.Spec, r *pipelines.Resources) ([]pipelines.Service, error) {
			return services(env, cfg, pipelines.Renames(Declare(Config{}), s), r)
		},
	}
}
