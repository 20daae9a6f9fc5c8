// Package topics is sluice's topic catalog: the name, key, partition count,
// cleanup policy and retention of every Kafka topic the pipelines use
// (docs/topics.md), plus idempotent creation and alignment of those topics with
// kadm (Ensure) and a per-topic summary of offsets (List).
//
// The catalog is data, not state: Catalog returns a fresh slice on every call
// and Select applies options to a copy, so tests can prefix names for
// isolation without affecting each other.
package topics

import (
	"time"
)

// Topic names (the topic catalog, docs/topics.md). Pipelines refer to topics through these
// constants; a prefix chosen with WithPrefix is prepended at run time.
const (
	BronzeRecords = "bronze.records"
	BronzeDLQ     = "bronze.dlq"
	ControlFlags  = "control.flags"

	IngestTasks = "ingest.tasks"
	IngestJobs  = "ingest.jobs"
	IngestDLQ   = "ingest.dlq"

	SmapProjectCreated   = "smap.project.created"
	SmapDataCollected    = "smap.data.collected"
	SmapAnalysisFinished = "smap.analysis.finished"
	SmapJobCompleted     = "smap.job.completed"
	SmapAnalyticsErrors  = "smap.analytics.errors"

	TradesImport = "trades.import"
	TradesEvents = "trades.events"
	TradesBias   = "trades.bias"
	CoachReflect = "coach.reflect"
	DigestReady  = "digest.ready"
	TradesDLQ    = "trades.dlq"
	// TradesImportState holds trades-import's import states (compacted,
	// co-partitioned with TradesImport; keyed by import_id, written to its
	// user's partition).
	TradesImportState = "trades.import.state"
	// TradesDigestState holds trades-digest's window store (compacted,
	// co-partitioned with TradesBias; keys W|user|start and C|user|start).
	TradesDigestState = "trades.digest.state"

	ModulesRefresh = "modules.refresh"
	ModulesState   = "modules.state"
	ModulesDLQ     = "modules.dlq"
)

// Cleanup policies (the Kafka cleanup.policy values sluice uses).
const (
	CleanupDelete  = "delete"
	CleanupCompact = "compact"
)

// Retention sentinels for Spec.Retention.
const (
	// BrokerDefault leaves retention.ms unmanaged: the broker's default applies.
	BrokerDefault time.Duration = 0
	// Infinite keeps records forever (retention.ms = -1).
	Infinite time.Duration = -1
)

// Kafka topic config names that Spec fields map onto.
const (
	ConfigCleanupPolicy          = "cleanup.policy"
	ConfigRetentionMs            = "retention.ms"
	ConfigMinCleanableDirtyRatio = "min.cleanable.dirty.ratio"
	ConfigSegmentMs              = "segment.ms"
	ConfigDeleteRetentionMs      = "delete.retention.ms"
)

// Default retentions of the catalog.
const (
	// DataRetention is how long delete-policy data topics keep records.
	DataRetention = 7 * 24 * time.Hour
	// DLQRetention is longer than DataRetention so that failures can be
	// inspected, archived and re-driven after a fix.
	DLQRetention = 14 * 24 * time.Hour
)

// Spec describes one topic.
type Spec struct {
	// Name is the topic name.
	Name string
	// Key documents what the record key is (e.g. "symbol").
	Key string
	// Partitions is the partition count (≥ 1).
	Partitions int32
	// ReplicationFactor is the replica count; -1 uses the broker default.
	// Ensure uses it only when it creates the topic.
	ReplicationFactor int16
	// Cleanup is CleanupDelete or CleanupCompact.
	Cleanup string
	// Retention is retention.ms: BrokerDefault (0) leaves it unmanaged,
	// Infinite (-1) keeps records forever, anything else is rounded down to
	// milliseconds.
	Retention time.Duration
	// Configs are extra topic configs managed by Ensure. They must not set
	// cleanup.policy or retention.ms (use Cleanup and Retention).
	Configs map[string]string
	// CoPartitionedWith names a topic that must have the same partition
	// count so that one consumer owns the same keys in both (e.g. a
	// compacted state topic and its command topic).
	CoPartitionedWith string
	// Doc says what the topic carries.
	Doc string
}

// TopicConfigs returns every topic config Ensure manages for s: cleanup.policy,
// retention.ms unless Retention is BrokerDefault, and Configs. The map is new.
func (s Spec) TopicConfigs() map[string]string {
	m := make(map[string]string, len(s.Configs)+2)
	for k, v := range s.Configs {
		m[k] = v
	}
	m[ConfigCleanupPolicy] = s.Cleanup
	if s.Retention != BrokerDefault {
		m[ConfigRetentionMs] = retentionMs(s.Retention)
	}
	return m
}

func (s Spec) clone() Spec {
	c := s
	if s.Configs != nil {
		c.Configs = make(map[string]string, len(s.Configs))
		for k, v := range s.Configs {
			c.Configs[k] = v
		}
	}
	return c
}

// compactConfigs are the extra configs of compacted state topics: compact
// once a tenth of the log is dirty, roll segments hourly so the active
// segment (which is never compacted) stays small, and keep tombstones a day
// so that restoring consumers see deletions.
func compactConfigs() map[string]string {
	return map[string]string{
		ConfigMinCleanableDirtyRatio: "0.1",
		ConfigSegmentMs:              "3600000",
		ConfigDeleteRetentionMs:      "86400000",
	}
}

func data(name, key string, partitions int32, doc string) Spec {
	return Spec{Name: name, Key: key, Partitions: partitions, ReplicationFactor: -1,
		Cleanup: CleanupDelete, Retention: DataRetention, Doc: doc}
}

func dlq(name, key string, doc string) Spec {
	return Spec{Name: name, Key: key, Partitions: 3, ReplicationFactor: -1,
		Cleanup: CleanupDelete, Retention: DLQRetention, Doc: doc}
}

func state(name, key string, partitions int32, doc string) Spec {
	return Spec{Name: name, Key: key, Partitions: partitions, ReplicationFactor: -1,
		Cleanup: CleanupCompact, Configs: compactConfigs(), Doc: doc}
}

// Catalog returns every catalog topic (docs/topics.md) with its default settings, in
// catalog order. The slice and its maps are new on every call.
func Catalog() []Spec {
	jobs := state(IngestJobs, "job key SYMBOL:YYYY-MM-DD", 3, "ticks job state (last record per job key)")
	jobs.CoPartitionedWith = IngestTasks
	importState := state(TradesImportState, "import_id, in its user's partition", 3, "trades-import state per import (last record per import_id)")
	importState.CoPartitionedWith = TradesImport
	digestState := state(TradesDigestState, "W|user|start and C|user|start, in the user's partition", 3, "trades-digest window store: window states (JSON) and their contribution sets (binary, one entry per trade id)")
	digestState.CoPartitionedWith = TradesBias
	modState := state(ModulesState, "TICKER:module", 3, "module state (greatest (epoch, version) per ticker and module, seed 003)")
	modState.CoPartitionedWith = ModulesRefresh
	return []Spec{
		data(BronzeRecords, "ta.bar: symbol; sa.article: url_canonical", 6, "bronze records awaiting validation (seed 000)"),
		dlq(BronzeDLQ, "original key", "bronze records that failed validation or the sink"),
		state(ControlFlags, "flag name, e.g. SCRAPE_SLOW", 1, "control flags (last value per flag)"),

		data(IngestTasks, "job key SYMBOL:YYYY-MM-DD", 3, "ticks trigger commands and segment tasks (seed 002)"),
		jobs,
		dlq(IngestDLQ, "job key SYMBOL:YYYY-MM-DD", "ticks segments that failed"),

		data(SmapProjectCreated, "project_id", 3, "smap project.created events (seed 001)"),
		data(SmapDataCollected, "item id", 3, "smap data.collected events: a raw item is in the object store"),
		data(SmapAnalysisFinished, "item id", 3, "smap analysis.finished events, produced in transactions: read with read_committed"),
		data(SmapJobCompleted, "project_id", 3, "smap job.completed events, one per project"),
		dlq(SmapAnalyticsErrors, "item id", "smap analytics DLQ"),

		data(TradesImport, "user id", 3, "trade imports (seed 004)"),
		data(TradesEvents, "user id", 3, "normalised trade events (seed 004)"),
		data(TradesBias, "user id", 3, "detected trading biases (seed 004)"),
		data(CoachReflect, "user id", 3, "coach reflection requests (seed 004)"),
		data(DigestReady, "user id", 3, "digests ready to send (seed 004)"),
		dlq(TradesDLQ, "user id", "trades pipeline DLQ"),
		importState,
		digestState,

		data(ModulesRefresh, "TICKER:module", 3, "module refresh requests (seed 003)"),
		modState,
		dlq(ModulesDLQ, "TICKER:module", "modules pipeline DLQ"),
	}
}

// Names returns the names of specs in order.
func Names(specs []Spec) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Name
	}
	return out
}
