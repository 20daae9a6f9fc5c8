// Package stages defines the vocabulary shared by every sluice pipeline: the
// typed record a stage sees ([Msg], with its attempt number), the stage
// function type ([Func]), the error vocabulary the runtime acts on
// ([DeadLetter], [DeadLetterWith], [Retry], [RetryAfter], [Wait], [Fatal]),
// the batch sink contract ([Sink]) and the dead-letter header names fixed
// by the design.
//
// Contracts:
//
//   - Ordering. The runtime (package stages/run) calls a stage for the records
//     of one partition one at a time, in offset order. Stages of different
//     partitions run concurrently, so a stage shared between partitions must be
//     safe for concurrent use.
//   - Delivery. A stage never commits offsets, never writes to a DLQ and
//     never returns dead-letter records as outputs. It returns outputs, an
//     error, or both with [DeadLetterWith]; the runtime builds every dead
//     letter (the original record with the dlq.* headers), counts it in its
//     DLQ metrics, and commits an offset only after the outputs of its
//     record were written by the sink and every dead-letter record was
//     acknowledged by the broker (at-least-once).
//   - Retries and waits. A stage has no retry loop, attempt counter or
//     sleep of its own: it returns a retry error ([Retry], [RetryAfter]),
//     and the runtime calls it again with [Msg.Attempt] incremented, up to
//     its retry policy ([Msg.MaxAttempts]; [Msg.LastAttempt] tells the last
//     call, where a stage that must record the failure somewhere returns
//     [DeadLetterWith]). A condition that is not a failure of the record (a
//     rate limit) is a [Wait]: no attempt is spent. [Msg.PrevErr] is the
//     previous call's error, through which a stage can carry partial
//     progress to its next attempt.
//   - Idempotence. Because a record may be delivered again after a crash or a
//     rebalance, stages and sinks must give the same result when they see the
//     same record twice.
package stages
