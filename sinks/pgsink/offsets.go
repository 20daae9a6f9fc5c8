package pgsink

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/stages"
)

// OffsetsDDL creates the table in which a sink built [WithOffsets] stores
// the consumer offsets of its batches, sluice_offsets, resolved through the
// connection's search_path. The sink runs it before its first claim or
// Write (so it needs CREATE on the schema unless the table was created
// beforehand with this statement). One row per consumer group and
// partition: the offset after the last batch whose rows committed
// (next_offset, -1 while the partition was claimed but no batch stored),
// that batch's last record's leader epoch, and the epoch of the partition's
// current owner (owner_epoch, see [Sink.Claim]).
const OffsetsDDL = `CREATE TABLE IF NOT EXISTS sluice_offsets (
	group_id     text        NOT NULL,
	topic        text        NOT NULL,
	partition    int         NOT NULL,
	next_offset  bigint      NOT NULL,
	leader_epoch int         NOT NULL,
	owner_epoch  int         NOT NULL,
	updated_at   timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (group_id, topic, partition))`

// ErrFenced is the error (wrapped) of a Write [WithOffsets] refused because
// a newer owner claimed the batch's partition since this one did: the
// writer is a member that lost the partition (a zombie). Nothing of the
// batch was written. The runtime retries it as a transient error until the
// worker is stopped, which the loss of the partition brings about.
var ErrFenced = errors.New("a newer owner claimed the partition")

// WithOffsets makes the sink store, in the transaction of each Write, the
// consumer offset after the Write's batch (its [stages.Position], which
// the runtime puts in Write's context when the runner has the sink as its
// offset store: run.WithOffsetStore(sink)), in table sluice_offsets (see
// [OffsetsDDL]). Rows and offsets then commit or fail together, and the
// runtime does not write the outputs of records below the stored offset
// again: every input record's effect lands exactly once, across crashes,
// rebalances and retries. It is meant for tables whose Update is not
// idempotent (a counter t.n + EXCLUDED.n, an append), where a redelivered
// batch would otherwise count twice. See docs/failures.md (exactly-once
// effects) for the guarantee and its limits.
//
// Contract and cost, compared with the default:
//
//   - Write needs a position in its context (a Write without one fails
//     with a fatal error).
//   - The whole batch is one transaction; the bisection that isolates rows
//     the database refuses, the item-by-item retries and the fallbacks run
//     in savepoints of it, and a transient error rolls back the whole batch
//     (nothing of it lands until a retry commits it whole).
//   - The offset is stored only when its owner epoch is the partition's
//     (see [Sink.Claim]) and above the stored offset: a Write of a member
//     that lost the partition fails with [ErrFenced] and writes nothing; a
//     batch whose offset is already stored (a Write retried after its
//     commit was lost in transit) is rolled back and reported written.
//   - One more statement per batch, which also serialises the Writes of
//     one partition on its offsets row (they are serial anyway).
func WithOffsets() Option {
	return func(o *options) { o.offsets = true }
}

// Claim makes the caller the owner of group's partition of topic: it
// stores an owner epoch of at least generation (and 1) and greater than
// the one stored, and returns that epoch and the stored next offset (-1:
// none). A claim waits for a Write of the partition that holds the offsets
// row, so a previous owner's batch either committed before it (and next
// covers it) or is refused after it ([ErrFenced]). It implements
// run.OffsetStore; the sink must be built [WithOffsets].
func (s *Sink[T]) Claim(ctx context.Context, group, topic string, partition, generation int32) (next int64, epoch int32, err error) {
	if !s.offsets {
		return 0, 0, errors.New("pgsink: Claim on a sink built without WithOffsets")
	}
	if err := s.ensureOffsets(ctx); err != nil {
		return 0, 0, err
	}
	err = s.inTx(ctx, s.db, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, claimSQL, group, topic, partition, generation).Scan(&next, &epoch)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("pgsink: claim %s/%d for group %s in sluice_offsets: %w", topic, partition, group, err)
	}
	return next, epoch, nil
}

const claimSQL = `INSERT INTO sluice_offsets AS o (group_id, topic, partition, next_offset, leader_epoch, owner_epoch, updated_at)
VALUES ($1, $2, $3, -1, -1, GREATEST($4::int, 1), now())
ON CONFLICT (group_id, topic, partition) DO UPDATE
SET owner_epoch = GREATEST(EXCLUDED.owner_epoch, o.owner_epoch + 1), updated_at = now()
RETURNING next_offset, owner_epoch`

// storeSQL stores a batch's offset when the stored owner epoch is not
// greater than the writer's and the stored offset is below the batch's.
// A refused update still locks the row, which storedRow then reads.
const storeSQL = `INSERT INTO sluice_offsets AS o (group_id, topic, partition, next_offset, leader_epoch, owner_epoch, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, now())
ON CONFLICT (group_id, topic, partition) DO UPDATE
SET next_offset = EXCLUDED.next_offset, leader_epoch = EXCLUDED.leader_epoch,
    owner_epoch = EXCLUDED.owner_epoch, updated_at = now()
WHERE o.owner_epoch <= EXCLUDED.owner_epoch AND o.next_offset < EXCLUDED.next_offset`

const storedRowSQL = `SELECT next_offset, owner_epoch FROM sluice_offsets
WHERE group_id = $1 AND topic = $2 AND partition = $3`

// ensureOffsets creates the offsets table unless this sink did already.
func (s *Sink[T]) ensureOffsets(ctx context.Context) error {
	s.offsetsMu.Lock()
	defer s.offsetsMu.Unlock()
	if s.offsetsOK {
		return nil
	}
	create := func(tx pgx.Tx) error { _, err := tx.Exec(ctx, OffsetsDDL); return err }
	err := s.inTx(ctx, s.db, create)
	if c := SQLState(err); c == "23505" || c == "42P07" {
		// Two sessions created it at once; IF NOT EXISTS sees it now.
		err = s.inTx(ctx, s.db, create)
	}
	if err != nil {
		return fmt.Errorf("pgsink: create table sluice_offsets: %w", err)
	}
	s.offsetsOK = true
	return nil
}

// errStored rolls back a Write whose offset is already stored.
var errStored = errors.New("offset already stored")

// writeWithOffset writes groups, the batch of w, and stores the batch's
// offset in one transaction (see WithOffsets).
func (s *Sink[T]) writeWithOffset(ctx context.Context, w *writer[T], groups []*group[T]) error {
	pos, ok := stages.PositionOf(ctx)
	if !ok {
		return stages.Fatal(fmt.Errorf("pgsink: sink of %s built WithOffsets written without a batch position (give the runner the sink with run.WithOffsetStore)", s.table.Name))
	}
	if err := s.ensureOffsets(ctx); err != nil {
		return err
	}
	err := s.inTx(ctx, s.db, func(tx pgx.Tx) error {
		w.db = tx
		if err := w.bisect(ctx, groups, false); err != nil {
			return err
		}
		return s.storeOffset(ctx, tx, pos)
	})
	if err != nil {
		// Nothing of the batch landed.
		w.written, w.affected, w.rejected = 0, 0, nil
	}
	if errors.Is(err, errStored) {
		s.log.Info("batch already written (its offset is stored): rolled back", "topic", pos.Topic, "partition", pos.Partition, "next_offset", pos.Next)
		w.written = len(w.batch)
		return nil
	}
	return err
}

// storeOffset stores pos in tx, or returns an error (errStored, or one
// wrapping ErrFenced) that rolls tx back.
func (s *Sink[T]) storeOffset(ctx context.Context, tx pgx.Tx, pos stages.Position) error {
	tag, err := tx.Exec(ctx, storeSQL, pos.Group, pos.Topic, pos.Partition, pos.Next, pos.LeaderEpoch, pos.Epoch)
	if err != nil {
		return fmt.Errorf("store offset %d of %s/%d: %w", pos.Next, pos.Topic, pos.Partition, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var next int64
	var epoch int32
	if err := tx.QueryRow(ctx, storedRowSQL, pos.Group, pos.Topic, pos.Partition).Scan(&next, &epoch); err != nil {
		return fmt.Errorf("read the stored offset of %s/%d: %w", pos.Topic, pos.Partition, err)
	}
	if epoch > pos.Epoch {
		return fmt.Errorf("store offset %d of %s/%d with owner epoch %d: the stored owner epoch is %d: %w",
			pos.Next, pos.Topic, pos.Partition, pos.Epoch, epoch, ErrFenced)
	}
	return errStored
}
