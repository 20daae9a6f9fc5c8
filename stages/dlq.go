package stages

// DLQ header names fixed by the design (DESIGN §3). Every DLQ record keeps the
// original key and value bytes and carries these headers.
const (
	HeaderReason          = "dlq.reason"
	HeaderRule            = "dlq.rule"
	HeaderError           = "dlq.error"
	HeaderStage           = "dlq.stage"
	HeaderSourceTopic     = "dlq.source.topic"
	HeaderSourcePartition = "dlq.source.partition"
	HeaderSourceOffset    = "dlq.source.offset"
	HeaderAttempts        = "dlq.attempts"
	HeaderFailedAt        = "dlq.failed_at"
	// HeaderRedriveCount counts how many times a record was re-driven from a
	// DLQ to its source topic; redrive refuses records past its limit.
	HeaderRedriveCount = "dlq.redrive_count"
	// HeaderValueOmitted marks a dead letter that could not carry the
	// original record because the DLQ topic refused its size: the DLQ record
	// has the dlq.* headers but no value and no source headers (and no key
	// when that was large too). The header says what was left out; the
	// original is at dlq.source.topic/partition/offset while that topic
	// retains it. Redrive refuses such records.
	HeaderValueOmitted = "dlq.value_omitted"
)
