// Package smap is the event-driven choreography of seed 001 (docs/pipelines/smap.md):
//
//	smap.project.created ─▶ collector ─▶ raw/{platform}/{item}.json (object store)
//	                                   └▶ smap.data.collected (key item id)
//	smap.data.collected  ─▶ analytics ─▶ post_analytics (PostgreSQL, upsert by project_id + item_id)
//	                                   ├▶ smap.analysis.finished (key item id), ok or error
//	                                   └▶ smap.analytics.errors (failed items, DLQ headers)
//	smap.analysis.finished ─▶ progress counter (Redis DB 1) ─▶ smap.job.completed, once per project
//
// Every event has the seed's envelope {event_id, timestamp, payload} (see
// Event and the smap.*.json schemas of package schemas).
//
// # Progress
//
// The state of project ID is the Redis hash smap:proj:ID (status, total,
// done, errors; TTL 7 days) in DB 1, kept by package stages/progress:
// INITIALIZING (project seen) → CRAWLING (items being found; the total
// grows by a target's distinct items once it is crawled and its items
// stored and journaled) → PROCESSING_WAIT (the collector sealed the total
// at the end of the crawl; the items are announced in the transaction
// that commits the project.created record) → DONE (the completion was
// published). Completion needs done ≥ total and a sealed
// total, so analytics running ahead of a slow crawl cannot finish a
// project early (the seed's chicken-and-egg case).
//
// # Failures count as done
//
// The analytics stage catches every failure of an item itself — missing
// raw object (sanity_fail, rule smap.raw_object_missing), corrupt raw JSON
// (decode_error, smap.raw_json), an analyser error or panic (exception,
// smap.analyzer.NAME), an object store that keeps failing
// (retries_exhausted, smap.raw_object_read: a transient read error is
// retried by the runtime, Config.Runtime.Retry, and fails the item at the
// record's last attempt). It returns the post_analytics row with
// error_type/error_msg and an analysis.finished event with status "error"
// as outputs of a dead letter (stages.DeadLetterWith): the sink writes
// them, and the runtime dead-letters the original data.collected record
// to smap.analytics.errors with the DLQ headers (dlq.stage
// smap-analytics), counted in
// sluice_dlq_records_by_reason_total{pipeline="smap-analytics"}, before
// it commits. The progress counter therefore sees every item, ok or failed,
// on one topic, and counts failed ones in errors as well as done. (A
// data.collected record that is not even a valid event cannot be
// attributed to a project: the runtime dead-letters it as decode_error and
// it is not counted.)
//
// An object key that no store can hold (objstore.ErrInvalidKey) is the
// record's fault: the item fails at once as sanity_fail, rule
// smap.object_key, after one read. In the collector, whose keys the input
// shapes only through the platform (see Crawl failures), a key the store
// refuses although objstore.ValidKey accepts it (a store with stricter
// rules, a prefix pushing it over a limit) is not retried either: the
// project.created record is dead-lettered at once as sanity_fail, rule
// smap.object_key; its project stays where it was (no state when the meta
// object is refused, CRAWLING when a raw object is) until the record is
// re-driven after the store is fixed. A permanent object-store configuration
// error (objstore.IsPermanent: AccessDenied, NoSuchBucket, bad
// credentials…) is nobody's item's fault: analytics and the collector stop
// their runner with a fatal error naming the S3 code and bucket, writing
// no dead letter and committing nothing past the record, which is
// redelivered once the configuration is fixed and the pipeline restarted.
//
// # Exactly one job.completed
//
// Counting is idempotent per item (a Redis set of counted item ids) and
// the completion is decided atomically in the same Lua script, which sets
// a pending flag; the event is published, and only after the broker
// acknowledged it is the project marked DONE. A crash between the
// decision and DONE leaves the flag set and the triggering record
// uncommitted; its redelivery (or the collector's re-seal, or a rebuild)
// publishes the completion again. In normal operation consumers see
// exactly one smap.job.completed per project; after such a crash they may
// see a second copy with the same event_id ("jc-" + project id), by which
// they de-duplicate. See package stages/progress for the precise contract.
//
// # Delivery and idempotence
//
// The three services are sluice runners. Item ids are
// derived from project, platform and source id (ItemID), so a re-crawl
// rewrites the same objects and announces the same items; post_analytics
// is an upsert; analysis.finished and data.collected have deterministic
// event ids. Replaying any topic changes no count and publishes no second
// completion. analysis.finished is produced by the analytics runtime in
// the Kafka transaction that commits its batch's input offsets and dead
// letters (run.Publisher; with the default Runtime.DLQCommit): a
// read_committed reader, the progress counter included, sees one event per
// data.collected record across kill -9, rebalances and broker restarts, at
// the cost of up to Runtime.CommitInterval (default 1s) before an event is
// visible. data.collected is published the same way by the collector's
// runtime, in the transaction that commits the project.created offset, so
// a project's announcements become visible together when its crawl ends.
// The crawl journal (projects/{id}.items.json, see crawlJournal) lists
// every item stored and counted, across interrupted crawls; the seal
// counts and announces exactly its items, and the sealing record delivered
// again (its transaction aborted) or re-driven from the DLQ (named by its
// stages.HeaderOrigin header) announces them again without crawling,
// while a duplicate project.created, or its dead letter re-driven,
// announces nothing. A read_committed reader therefore sees one data.collected per
// item, except after a replay of project.created (an operator's offset
// reset), which announces the items of sealed projects not yet DONE again
// (counted once). With Runtime.DLQCommit at-least-once the announcements
// are at least once.
//
// # Lost Redis state
//
// If Redis loses a project's keys, the counter retries its records
// (Config.MissingStateWait, bounded by the runtime's retry attempts) and
// RebuildProgress (`sluice smap rebuild-progress ID`) restores the state
// from post_analytics plus the project's meta object projects/{id}.json
// (keywords, sealed total, completion time) written by the collector.
// That meta object also tells the counter at once about a project without
// state that is not a lost one: never collected (no meta object) is
// dead-lettered as sanity_fail, rule smap.unknown_project; completed and
// expired (a replay) is dropped. The collector reads it too: a
// project.created of a project whose completion it records is skipped
// (the replay after the state expired re-crawls nothing and publishes no
// second completion).
//
// RebuildProgress may run while the pipeline works: it reads the systems
// of record again after replacing the state and re-applies what happened
// in between (items analysed, a seal, a completion published).
//
// # Crawl failures
//
// A target whose crawl fails transiently (the crawler returns an error
// classified with stages.Retry or stages.RetryAfter: a timeout, a dropped
// connection, an HTTP 5xx or 429) is crawled again at the next attempt of
// the project.created record, which the runtime makes after a wait of
// Config.CrawlRetry's backoff with jitter (at least the error's
// RetryAfter, capped at CrawlRetry.Max), up to attempt
// CrawlRetry.MaxAttempts (default 4), each retry counted in
// smap_crawl_retries_total. The next attempt crawls only the targets that
// failed (the attempt's progress rides on its error, stages.Msg.PrevErr);
// the items a failing target yielded before its failure are stored,
// journaled and counted; a retried crawl finds them again, and they are
// counted and announced once. A revoke or a
// shutdown ends a wait between attempts at once: the project.created
// record is left uncommitted (not dead-lettered) and its next owner
// crawls the project again.
// A target whose crawl fails permanently (any other error, or a panic of
// the crawler) or on every attempt is skipped and counted once in
// smap_crawl_errors_total; so is, at once and without a retry, a target
// that yields an item whose object key no store can hold: the key
// raw/{slug}/{slug}-{hash}.json repeats the item's platform slug (its
// platform, else the target's, lowercased, only [a-z0-9_-] kept), so a
// slug over 229 bytes makes the object name longer than
// objstore.MaxSegmentLen. The project completes with the items of the
// other targets (and those the failed target found before failing). A
// skipped target is not an item: it changes neither the total nor the
// errors count of the progress state. A project without any item
// completes at its seal and reports 100 %.
//
// # Metrics
//
// The platform label of smap_items_collected_total,
// smap_crawl_errors_total and smap_crawl_retries_total comes from the
// input, so it is bounded per process: tiktok, facebook, youtube and news
// (lowercased; "unknown" for none) always have their own series, as do
// the first 20 other platforms of at most 32 bytes; any other platform
// counts as "other".
package smap
