// Package stages defines the vocabulary shared by every sluice pipeline: the
// typed record a stage sees ([Msg]), the stage function type ([Func]), the
// error vocabulary the runtime acts on ([DeadLetter], [Retry], [RetryAfter],
// [Fatal]), the batch sink contract ([Sink]) and the dead-letter header names
// fixed by the design.
//
// Contracts:
//
//   - Ordering. The runtime (package stages/run) calls a stage for the records
//     of one partition one at a time, in offset order. Stages of different
//     partitions run concurrently, so a stage shared between partitions must be
//     safe for concurrent use.
//   - Delivery. A stage never commits offsets and never writes to a DLQ. It
//     returns outputs or an error; the runtime commits an offset only after the
//     outputs of its record were written by the sink and every dead-letter
//     record was acknowledged by the broker (at-least-once).
//   - Idempotence. Because a record may be delivered again after a crash or a
//     rebalance, stages and sinks must give the same result when they see the
//     same record twice.
package stages
