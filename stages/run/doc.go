// Package run is the sluice runtime: it consumes Kafka topics as a consumer
// group and drives a pipeline of decode → stage → sink for every record.
//
// # Ordering
//
// Every assigned partition gets one worker goroutine. A worker handles its
// partition's records strictly in offset order, so records of one key (which
// Kafka puts in one partition) are processed in the order they were produced.
// Parallelism comes from partitions and from more members in the group, and
// with Config.KeyConcurrency from the keys of a batch: records of different
// keys then run concurrently (at most KeyConcurrency at a time), those of
// one key still one after the other in offset order, while outputs, dead
// letters and the committed offset stay in offset order (a batch commits up
// to its first record not done). Such a batch grows by the records queued
// while its records run (up to BatchMaxRecords and BatchMaxBytes, not with
// coalescing windows), so that one slow record holds back its batch's
// commit but not the partition's other keys.
//
// # Delivery
//
// At-least-once. A worker collects a batch (bounded by record count, bytes
// and a linger time), runs the stage for every record, writes the outputs
// with one Sink.Write, produces the batch's dead-letter records and then
// the changelog records of its state writes (see State below), waits for
// the broker's acknowledgement, and only then marks the batch's last
// offset for commit. With coalescing windows (Config.Window, see [WindowConfig])
// the outputs of several batches are merged per key and written together,
// and the offsets are marked after that write. Marked offsets are committed
// periodically, when partitions are revoked and on shutdown. A crash therefore re-delivers at most the records
// after the last commit; sinks and stages must be idempotent.
//
// A sink whose effect is not idempotent (a counter, an append) can be the
// runner's [OffsetStore] ([WithOffsetStore]; pgsink.WithOffsets): it stores
// each batch's [stages.Position] in the transaction of its effects, the
// runner claims each assigned partition from it before processing it, and
// the outputs of records below the stored offset are not written again, so
// each record's effect lands exactly once (docs/failures.md, exactly-once
// effects).
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
// Dead letters commit with the offsets behind them (Config.DLQCommit):
// by default the runner's committer produces them in one Kafka transaction
// with the group's offset commit that covers their records (started as
// soon as the committer is handed dead letters; offsets alone commit every
// Config.CommitInterval, on revoke and on shutdown), so a read_committed
// reader of the DLQ topic sees exactly one dead letter per record across
// crashes, rebalances and broker outages; a failed transaction is aborted
// and committed again with later offsets. With DLQAtLeastOnce they are
// produced at the end of their batch, before its offsets are marked, and
// a failed produce is retried until it succeeds. Each is counted, once
// committed (acknowledged, with DLQAtLeastOnce), in
// sluice_dlq_records_total{reason,rule} and
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
// A sink whose effect is announced by Kafka records implements
// [Publisher]: the runner produces the records it returns for each
// successful Write, by default in the same transaction as the batch's
// offsets and dead letters (read_committed readers see each once; they
// become visible with the next periodic commit), never the sink itself.
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
// # Backpressure and memory
//
// A worker buffers at most Config.MaxInFlight records, and at most its
// share of the memory budget's records; beyond that the partition's fetches
// are paused (kgo PauseFetchPartitions) until the worker drains, so a slow
// or paused partition never blocks the others. One memory budget
// ([Budget], [WithBudget]; by default 35 % of GOMEMLIMIT or of the
// cgroup's memory limit, see [BudgetFor]) bounds the records fetched and
// not yet processed and the outputs held by coalescing windows, of all the
// partitions (and runners) sharing it: when it is full, the runner stops
// polling and windows are written early, so a backlog of any size runs in
// bounded memory. Nothing is dropped. The Kafka client's fetch buffers
// (FetchMaxBytes, FetchMaxPartitionBytes, MaxConcurrentFetches) are sized
// from the budget unless WithKafkaOpts sets them.
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
// # State
//
// A [Store] is keyed state kept per partition of the runner's (single)
// input topic and backed by a compacted changelog topic co-partitioned
// with it: Run refuses to start, naming both topics and their partition
// counts, when the changelog does not have the input's partition count. A
// partition's store is restored from its changelog partition on
// assignment, by the partition's worker, before any of its records is
// processed; Ready is false and the gauge sluice_state_restoring counts
// the partition meanwhile (sluice_state_restore_records_total counts the
// records read). A stage reaches its record's partition of a store with
// [Store.Of] on the context it is called with; its reads see its own
// earlier writes, of the same batch included. The changed keys of a batch
// are produced as one changelog record each (the latest value, or a
// tombstone for Delete) after the batch's outputs were written and its
// dead letters produced, and acknowledged before its offsets are marked;
// with coalescing windows, after the window's write. State is thus never
// behind a committed offset, and never ahead of the outputs it stands for;
// it may be ahead of the committed offset after a crash, so a stage must
// apply a redelivered record idempotently against its own state. Writes
// are not rolled back when the stage then fails. [Partition.PutNow] makes
// one value durable at once, ahead of the batch's outputs (a lease that
// must be durable before an external call).
//
// # Fencing
//
// Every changelog record carries a fencing [Token] (epoch, version) in
// headers. The epoch is the group generation at which the member got the
// partition (see [Owner] and [AssignedGeneration]), raised above the
// greatest epoch in the changelog if need be; the version counts the
// partition's writes. Owners write a changelog partition one after the
// other, so a record whose epoch is below one read before it is a
// zombie's late write and a restore refuses it; StoreConfig.Fold chooses
// among the others (the last record by default, the greatest token with
// [KeepGreatest]). A worker the runtime abandoned, or whose partition was
// lost, produces no state after it was abandoned or lost (a produce
// already in flight may still land) and its later writes fail with
// [ErrPartitionClosed]. Refusals are counted in
// sluice_state_fenced_total{where=restore|fold|write}.
//
// The fence holds until compaction: compaction keeps a key's last record
// by offset, so a zombie's late record of a key removes the new owner's
// earlier record of it, and a restore then misses the key or restores the
// zombie's value (see [Token]).
//
// # Timers
//
// [WithTimers] sets a function for a partition's periodic punctuation and
// for the one-shot timers stages set on store entries
// ([Partition.SetTimer]; the timer is stored with the entry, so it
// survives restarts and rebalances). Timers fire on the worker of the
// partition, on the member that owns it, between batches: never
// concurrently with a batch of the partition. A firing's outputs are
// written by the sink and its state writes (the keyed timer's clearing
// included) produced before the worker goes on, like a record's. A firing
// is at-least-once: one interrupted by a crash before its state was
// produced fires again on the next owner, so its effects must be
// idempotent or guarded by state written with them.
//
// # Thread safety
//
// A Runner is started once with Run. Ready may be called from any
// goroutine. Stages and sinks are shared by all partition workers and must be
// safe for concurrent use. A store's [Partition] is used by its partition's
// worker only (the stage and timer calls of one partition never overlap,
// except the stage calls of different keys with Config.KeyConcurrency);
// its methods are safe for concurrent use.
package run
