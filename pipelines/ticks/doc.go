// Package ticks is the ticks ingestion pipeline (seed 002, docs/pipelines/ticks.md):
// chained micro-tasks fetch one day of ticks per symbol, segment by
// segment, from a rate-limited tick source into Parquet files in the object
// store.
//
// # Topics and ownership
//
// ingest.tasks (key SYMBOL:YYYY-MM-DD) carries trigger commands, segment
// tasks and the supervisor's stall and bootstrap commands. ingest.jobs is
// compacted and co-partitioned with it: the job state of a key lives in the
// partition with the same number as its tasks. The job states are the
// runtime's state store (package stages/run, Store) with ingest.jobs as its
// changelog: the Worker owning task partition p has the states of jobs
// partition p restored before it processes a task of p (the runner
// reports ready only after that) and is the only writer of those states.
// Chained tasks are produced into partition p explicitly; after a batch's
// tasks (and dead letters) are acknowledged, the runtime produces the
// batch's changed states, one record per job, and only then commits the
// batch's offsets (at-least-once). A stall with a re-trigger writes the
// STALLED state at once, so that it stays in the job's history before the
// new instance's state.
//
// # A segment task
//
//  1. Fence: a task whose job_instance_id is not the state's is a zombie
//     and is dropped; nothing is written.
//  2. Heartbeat.
//  3. Idempotency: if ticks/{symbol}/{date}/part_{start_ts}_{instance}.parquet
//     exists, is readable and has rows, its metadata is used and the source
//     is not called.
//  4. Otherwise a rate-limited fetch (stages/ratelimit: a denial pauses the
//     partition until the computed wait, with backoff and jitter, without
//     spending an attempt) of at most
//     SegmentMaxTicks ticks, written as one Parquet file whose key/value
//     metadata holds the covered range (sluice.range_start/range_end) —
//     atomically (directory: .tmp, fsync, rename; S3: one PUT). Files of
//     other instances starting inside the range are deleted (overwritten).
//  5. Fence again, then the state: the cursor (inclusive high-water mark of
//     the contiguous covered range) moves to the range end — never for
//     backfill tasks — and the next task starts at last_tick_ts + 1 ms
//     until the session end, when the job is COMPLETED.
//
// The state records the offset of the record that last chained the main
// line (JobState.ChainOffset: a trigger, stall re-trigger, bootstrap or the
// segment that last moved the cursor). A crash between the state write and
// the offset commit redelivers that record: only then is the task it
// chained sent again (it may have been lost). Any other copy of a done
// segment is dropped, so a re-sent task never becomes a second live chain.
//
// Transient failures (504s, pacing violations, object-store errors) are
// retried by the runtime with exponential backoff and jitter up to
// Config.Retry (the runtime's retry policy); at the task's last attempt
// (stages.Msg.LastAttempt) the job is FAILED with last_error_type and the
// runtime dead-letters the task to the DLQ topic with reason
// retries_exhausted (stages.DeadLetterWith: the FAILED state is written
// too), counted in sluice_dlq_records_by_reason_total{pipeline="ticks"}.
// Rate-limit denials are not failures: they are waits (stages.Wait) that
// spend no attempt.
// A permanent object-store configuration error (objstore.IsPermanent:
// AccessDenied, NoSuchBucket, bad credentials…) is not retried and fails
// no job: the worker's Run returns a fatal error naming the S3 code and
// bucket, without committing the task, which is redelivered once the
// configuration is fixed and the worker restarted.
//
// # Session end
//
// A job is ingested once its session has ended: during (or before) a
// session a source returns only the ticks up to now, and the job would be
// COMPLETED with part of the day. The Coordinator refuses a trigger until
// Config.SessionSettle (default 1 min) after the session end (HTTP 400,
// the CLI exits with the error) and sends nothing; the worker dead-letters
// a trigger or bootstrap command whose session ends after its own clock
// (sanity_fail, rule ticks.session).
//
// # Supervisor
//
// The Supervisor marks RUNNING jobs whose heartbeat is older than
// StallAfter STALLED (optionally re-triggering them from the cursor under a
// new instance), and Bootstrap rebuilds lost job states from the segment
// files' names and metadata, sending backfill tasks for holes. Both only
// send commands; the owner applies them. The owner checks a bootstrap
// command before applying any of it (checkBootstrap): a state of another
// job, an invalid symbol, date, account, session, instance or status (one
// of the five job statuses), a cursor or gap outside the session, or a
// redundant file that is not a valid segment key of the job is
// dead-lettered as sanity_fail (rules
// ticks.symbol, ticks.date, ticks.account, ticks.session or
// ticks.bootstrap).
//
// # Known limits
//
// A fetch that finds no tick writes no file, so when a session's tick
// count is a multiple of the segment size the files' covered ranges end at
// the last tick rather than at the session end; bootstrap then re-checks
// the tail with one more (empty) fetch.
package ticks
