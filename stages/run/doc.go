// Package run is the sluice runtime: it consumes Kafka topics as a consumer
// group and drives a pipeline of decode → stage → sink for every record.
//
// # Ordering
//
// Every assigned partition gets one worker goroutine. A worker handles its
// partition's records strictly in offset order, so records of one key (which
// Kafka puts in one partition) are processed in the order they were produced.
// Parallelism comes from partitions and from more members in the group.
//
// # Delivery
//
// At-least-once. A worker collects a batch (bounded by record count, bytes
// and a linger time), runs the stage for every record, writes the outputs
// with one Sink.Write, produces the batch's dead-letter records and waits for
// the broker's acknowledgement, and only then marks the batch's last offset
// for commit. With coalescing windows (Config.Window, see [WindowConfig])
// the outputs of several batches are merged per key and written together,
// and the offsets are marked after that write. Marked offsets are committed
// periodically, when partitions are revoked and on shutdown. A crash therefore re-delivers at most the records
// after the last commit; sinks and stages must be idempotent.
//
// Records that retention or DeleteRecords removed before the group consumed
// them (its committed offset, or a paused partition's position, fell below
// the log start) are gone: the partition resumes at the log start, and the
// runner logs a WARN with the deleted offset range and counts it in
// sluice_offsets_skipped_total. See Config.StartOffset.
//
// With Config.StartOffset "latest", a partition the group has no commit for
// starts at its end, and that offset is committed for the group when the
// partition is assigned, before any of its records is processed: a member
// that stops or loses the partition before its first commit of a processed
// record leaves the next owner that start, not a later log end, so the
// records produced in between are not skipped.
//
// # Errors
//
// A decode error or a decoder panic dead-letters the record as decode_error;
// a stage panic is an exception. Stage errors are interpreted with
// [stages.Classify]: dead-letter errors go
// to the DLQ topic at once with the DLQ headers of the design (a
// [stages.DeadLetterWith] also has its outputs written, like any others);
// retry errors are retried with exponential backoff and jitter while the
// partition's fetches are paused, up to Config.Retry.MaxAttempts, then
// dead-lettered as retries_exhausted; a fatal error stops the runner
// without committing the failing record. The runtime is the only retrier
// and the only DLQ writer: it gives the stage its attempt number
// (stages.Msg.Attempt, from 1, one more per retry), the bound
// (Msg.MaxAttempts, Config.Retry.MaxAttempts) and the previous call's error
// (Msg.PrevErr). A [stages.Wait] calls the stage again with the same
// record and attempt number after the wait (at least 10ms, at most 5
// minutes), spending no attempt and never dead-lettering the record;
// meanwhile only that partition's fetches are paused (the poll loop and
// the other partitions go on), the wait ends early when the partition is
// revoked or the runner stops (the record is left for redelivery), and it
// is counted in sluice_runtime_waits_total and
// sluice_runtime_wait_seconds_total (time waited). An input topic deleted or recreated under the runner is
// fatal too (see [Runner.Run]). Sink errors other than [*stages.Rejections] are transient:
// the batch is retried (never dead-lettered) and no offset moves past it,
// after Config.SinkRetry's backoff or, for a [stages.RetryAfter] error, at
// least the error's wait (capped at 5 minutes). The source records of the
// items a sink rejects are dead-lettered as sink_rejected with the
// rejection's rule. When the rejection's error is a dead letter itself
// ([stages.Classify], e.g. a caller's [stages.DeadLetter] that kafkasink
// passes on), its reason is dlq.reason instead if it is one of the
// design's, and its rule is dlq.rule when the rejection has none.
//
// Dead letters are produced before the offsets behind them are marked; a
// failed DLQ produce is retried until it succeeds. Each is counted, once
// acknowledged, in sluice_dlq_records_total{reason,rule} and
// sluice_dlq_records_by_reason_total{reason}. dlq.error is cut to 4 KiB.
// A dead letter the DLQ topic refuses as too large (its max.message.bytes)
// is produced as a stub instead: the dlq.* headers plus
// [stages.HeaderValueOmitted], without the record's value and headers, so
// one huge record cannot hang its partition; the original stays at its
// source coordinates. A stub the DLQ topic still refuses as too large (a
// max.message.bytes below the size of the dlq.* headers alone) is a fatal
// error naming the DLQ topic and its limit: Run returns it and the
// record's offset is not committed, since no dead letter of it can ever be
// produced and skipping it would lose it.
//
// Without a DLQ topic (Config.NoDLQ, for a pipeline whose input is itself a
// DLQ) a record that would be dead-lettered is a fatal error instead, and
// its offset is not committed.
//
// # One-shot runs
//
// With Config.StopAtEnd, Run processes the group's backlog of when it
// started (up to each partition's end, transaction markers included) and
// returns nil by itself, as after a cancel; see Config.StopAtEnd.
//
// # Backpressure
//
// A worker buffers at most Config.MaxInFlight records; beyond that the
// partition's fetches are paused (kgo PauseFetchPartitions) until the worker
// drains, so a slow or paused partition never blocks the others and memory
// stays bounded.
//
// # Rebalances
//
// The group uses the cooperative-sticky balancer. On revoke, workers of the
// revoked partitions finish their current batch (or abandon it after
// Config.RevokeTimeout), write their open coalescing windows (see
// [WindowConfig]), their offsets are committed synchronously, and only
// then does the callback return and the partitions move. Shutdown does the
// same for every partition. A stage need not wait that long: the channel
// [stages.Stopping] of its context closes when its partition is asked to
// stop, and a stage error wrapping [stages.ErrStopped] then leaves its
// record and the rest of the batch uncommitted (not retried, not
// dead-lettered), the records before it being written and committed. A
// worker that
// does not return within 2s of being cancelled (a sink or stage that
// ignores its context) is left behind: it never marks an offset, so its
// batch is redelivered, and neither a rebalance nor the shutdown waits for
// it. On partitions lost
// (a fatal group error), workers are abandoned without committing.
//
// # Thread safety
//
// A Runner is started once with Run. Ready and Metrics may be called from any
// goroutine. Stages and sinks are shared by all partition workers and must be
// safe for concurrent use.
package run
