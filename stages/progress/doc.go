// Package progress is a reusable, exact progress counter for "N items, then
// one completion" workflows, kept in Redis: a [Tracker] owns the state of
// each job (a project, a batch, an import …), and [Stage] + [NewSink] plug
// it into a sluice pipeline so that every processed item is counted once and
// the completion of a job is published once.
//
// # State
//
// For a job id and a key prefix P (e.g. "smap:proj:") the tracker keeps:
//
//	P{id}         hash  status, total, done, errors, sealed (0/1),
//	                    pending (0/1), pending_by, completed_at
//	P{id}:items   set   ids of the items already counted
//	P{id}:found   set   ids of the items discovered (what total counts)
//
// Because the set keys are the hash key plus a suffix, a job id that ends
// in ":items" or ":found" is refused ([CheckJobID], [ErrInvalidID]) by
// every call that takes a job id: the hash of job "x:items" would be the
// items set of job "x". Every other non-empty id is accepted, and the keys
// of two different accepted ids never coincide.
//
// All three share one TTL (default 7 days, set when the job is created and
// refreshed on the sets as they grow). Statuses go INITIALIZING → CRAWLING
// (items are being discovered) → PROCESSING_WAIT (the total is sealed) →
// DONE. Every mutation is one Lua script, so concurrent workers in any
// number of processes see a consistent state. The keys of one job are
// touched together by each script, so a Redis Cluster deployment would need
// hash tags in the prefix; sluice targets a single Redis (or a replicated
// primary).
//
// # Counting exactly once
//
// [Tracker.Count] adds the item to P{id}:items and increments done (and
// errors for a failed item) only when the item was not there yet, so a
// redelivered item changes nothing. The total only grows with distinct
// discovered items ([Tracker.Discover]) and is final once sealed
// ([Tracker.Seal]).
//
// # Completion exactly once
//
// The completion decision is taken inside the same script that counts (or
// seals): when the total is sealed, done ≥ total, the status is not DONE and
// no completion is pending, the script sets pending=1 and tells its caller
// to publish. The caller publishes the completion event and, only after the
// broker acknowledged it, calls [Tracker.MarkDone], which sets status DONE
// and clears pending. A crash anywhere between the decision and MarkDone
// leaves pending=1: the input record that triggered the decision was not
// committed, so it is delivered again: a Count of the item that took the
// decision (pending_by), or any Seal, of a job whose completion is pending
// and not DONE asks its caller to publish again ([Decision.Repeat]); a
// Rebuild decides afresh. Duplicates of other items (a rebalance
// redelivering uncommitted records while the completion is being
// published) do not, so they cannot publish it twice. Once DONE, nothing is
// ever published again.
//
// "Exactly once" therefore means: in normal operation (no crash, no
// producer retry after an unacknowledged write) consumers see exactly one
// completion per job; after a crash between the publish and MarkDone they
// may see a second copy, which carries the same deterministic event id
// (the caller derives it from the job id), so consumers de-duplicate by
// that id. A completion is never lost: it is either DONE (published and
// acknowledged) or pending (and re-published by the redelivery of the
// deciding record, a seal or a rebuild; when the deciding record was
// dead-lettered after its decision, redriving it or rebuilding the job
// publishes the completion).
//
// # Lost state
//
// When the hash of a job is missing (Redis flushed, TTL expired) Count
// returns [ErrMissing] and does not recreate it: counting onto an empty
// state would make done wrong. The pipeline retries the record; an operator
// rebuilds the state from the system of record with [Tracker.Rebuild],
// which replaces the job's keys in one script.
//
// # Thread safety
//
// A Tracker is safe for concurrent use; the stage and the sink are too.
package progress
