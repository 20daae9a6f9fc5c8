// Package silver is the domain logic of the silver pipeline (docs/pipelines/silver.md,
// seed 000): bronze records from the bronze.records topic are decoded
// ([Decode]), checked against the cheap sanity rules and turned into rows
// ([Stage]), and upserted into ta_silver / sa_silver ([NewSink], built on
// package sinks/pgsink) with the merge semantics of the seed ([MergeTA],
// [MergeSA], [TATable], [SATable]).
//
// Everything here except the sink is pure: no Kafka, no database, no clock
// other than the injected one. The package also ships a deterministic corpus
// generator ([GenerateCorpus]) for tests, the demo and benchmarks.
//
// # Record format
//
// A bronze record value is an envelope (fixed by the design):
//
//	{"task_type":"ta.bar"|"sa.article","payload":{…},"task_id":"optional","first_seen":"optional RFC 3339"}
//
// The key is the symbol for ta.bar and url_canonical for sa.article.
//
// # Where values come from
//
//   - JSON null is the same as an absent field everywhere.
//   - A string the pipeline reads (a rule's field, a column, task_type,
//     task_id) must be text: valid UTF-8, and no escaped half of a UTF-16
//     surrogate pair ("\ud800" alone). Otherwise the record is dead-lettered
//     with decode_error and an empty rule, whichever rule reads the field
//     (it is not a wrong type but undecodable JSON: record values are UTF-8
//     JSON, see docs/topics.md); nothing is stored with U+FFFD in place of what was
//     sent. Members the pipeline ignores are not checked, and language,
//     never a failure, becomes "unknown".
//   - ta_silver.first_seen_time: the payload's first_seen_time (RFC 3339) if
//     present, else the envelope's first_seen, else the Kafka record
//     timestamp, else the injected clock's now.
//   - sa_silver.first_seen_time: the payload's first_seen_time if present,
//     else the envelope's first_seen; when neither is present the record
//     fails rule sa.first_seen (the column is NOT NULL and the rule needs it).
//   - "RFC 3339" is its date-time grammar exactly (§5.6): two-digit fields,
//     "." before a fraction, "Z" or an offset ±hh:mm with hours 00–23; "T"
//     and "Z" may be lower case. Spellings that only Go's time.Parse takes
//     ("," before the fraction, a one-digit hour, +24:00, +07:60) fail.
//   - Timestamps are truncated to microseconds (PostgreSQL's precision) before
//     the rules compare them, so what is checked is what is stored.
//   - ta currency: absent, null or "" becomes "VND"; price_multiplier absent
//     or null becomes 1.0 (the DDL default).
//   - sa language: "vi" and "en" are kept; anything else, absent or of
//     another JSON type included, becomes "unknown". It never fails a record.
//
// # Fields without a rule
//
// The fixed rules cover the fields they name; a field of the wrong JSON type
// fails its rule. Payload fields that no rule covers (ta: vwap, adj_close,
// price_multiplier, source, content_hash, first_seen_time; sa: title, author,
// topic_tags, hype_raw, hype_crowd, hype_elitist, account_weights_applied) are
// checked only for their JSON type, after every rule passed; a wrong type
// dead-letters the record with reason decode_error and an empty rule, because
// the payload cannot be mapped to the row. Their values are not otherwise
// constrained (no rule says so). Unknown payload fields are ignored.
package silver
