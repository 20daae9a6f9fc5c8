package pgsink_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
)

// hit is one increment of the counter of key K by N: a non-idempotent
// effect (n = t.n + EXCLUDED.n), written twice it counts twice.
type hit struct {
	K string
	N int64
}

// countersDDL: n may not go below 0 (a hit of a negative N is refused);
// a row of key 'boom' fails with a serialization failure (40001, a
// transient error) when inserted or updated.
const countersDDL = `CREATE TABLE counters (k text PRIMARY KEY, n bigint NOT NULL CHECK (n >= 0));
CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'boom' USING ERRCODE = '40001'; END $$;
CREATE TRIGGER boom BEFORE INSERT OR UPDATE ON counters FOR EACH ROW WHEN (NEW.k = 'boom') EXECUTE FUNCTION boom()`

func countersTable() pgsink.Table[hit] {
	return pgsink.Table[hit]{
		Name: "counters", Columns: []string{"k", "n"}, Key: []string{"k"},
		Update: []pgsink.Set{{Column: "n", Expr: "t.n + EXCLUDED.n"}},
		KeyOf:  func(h hit) string { return h.K },
		Merge:  func(old, next hit) hit { return hit{K: next.K, N: old.N + next.N} },
		Values: func(h hit) []any { return []any{h.K, h.N} },
	}
}

// countersSink creates the counters table in a fresh schema and returns a
// sink for it built with opts.
func countersSink(t *testing.T, srv *testkit.PostgresServer, opts ...pgsink.Option) (context.Context, *pgxpool.Pool, *pgsink.Sink[hit]) {
	t.Helper()
	pg := srv.Postgres(t)
	ctx := testkit.Context(t)
	if _, err := pg.Pool.Exec(ctx, countersDDL); err != nil {
		t.Fatalf("create table: %v", err)
	}
	s, err := pgsink.New(pg.Pool, countersTable(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, pg.Pool, s
}

func readCounters(t *testing.T, ctx context.Context, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	rows, err := pool.Query(ctx, "SELECT k, n FROM counters")
	if err != nil {
		t.Fatalf("read counters: %v", err)
	}
	out := map[string]int64{}
	var k string
	var n int64
	for rows.Next() {
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatalf("scan: %v", err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read counters: %v", err)
	}
	return out
}

// storedOffset returns the stored next offset and owner epoch of group's
// partition p of topic "in" (-2, 0: no row).
func storedOffset(t *testing.T, ctx context.Context, pool *pgxpool.Pool, group string, p int32) (int64, int32) {
	t.Helper()
	var next int64
	var epoch int32
	err := pool.QueryRow(ctx, "SELECT next_offset, owner_epoch FROM sluice_offsets WHERE group_id = $1 AND topic = 'in' AND partition = $2", group, p).Scan(&next, &epoch)
	if err != nil {
		return -2, 0
	}
	return next, epoch
}

func at(group string, p int32, next int64, epoch int32) context.Context {
	return stages.WithPosition(context.Background(), stages.Position{Group: group, Topic: "in", Partition: p, Next: next, LeaderEpoch: 0, Epoch: epoch})
}

func TestOffsetsCommitWithTheRows(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	eachPath(t, func(t *testing.T, path writePath) {
		ctx, pool, s := countersSink(t, srv, path.opt, pgsink.WithOffsets())

		next, epoch, err := s.Claim(ctx, "g", "in", 0, 3)
		if err != nil || next != -1 || epoch != 3 {
			t.Fatalf("first claim = %d, %d, %v; want -1, 3 (the generation), nil", next, epoch, err)
		}
		if err := s.Write(at("g", 0, 3, epoch), []hit{{"a", 1}, {"b", 1}, {"a", 1}}); err != nil {
			t.Fatal(err)
		}
		if got := readCounters(t, ctx, pool); got["a"] != 2 || got["b"] != 1 {
			t.Fatalf("counters = %v, want a=2 b=1", got)
		}
		if n, e := storedOffset(t, ctx, pool, "g", 0); n != 3 || e != epoch {
			t.Fatalf("stored = %d (epoch %d), want 3 (epoch %d)", n, e, epoch)
		}
		// The same batch again (a retry after a commit whose answer was lost)
		// and an older one: reported written, nothing counted twice, the
		// stored offset does not move back.
		if err := s.Write(at("g", 0, 3, epoch), []hit{{"a", 1}, {"b", 1}, {"a", 1}}); err != nil {
			t.Fatalf("batch written again: %v", err)
		}
		if err := s.Write(at("g", 0, 2, epoch), []hit{{"a", 1}, {"b", 1}}); err != nil {
			t.Fatalf("older batch: %v", err)
		}
		if got := readCounters(t, ctx, pool); got["a"] != 2 || got["b"] != 1 {
			t.Fatalf("after the batches written again, counters = %v, want a=2 b=1", got)
		}
		if n, _ := storedOffset(t, ctx, pool, "g", 0); n != 3 {
			t.Fatalf("stored = %d after an older batch, want 3", n)
		}
		// The next batch lands; another group's and another partition's
		// offsets are rows of their own.
		if err := s.Write(at("g", 0, 5, epoch), []hit{{"a", 1}, {"c", 1}}); err != nil {
			t.Fatal(err)
		}
		if _, e2, err := s.Claim(ctx, "g2", "in", 0, 1); err != nil {
			t.Fatal(err)
		} else if err := s.Write(at("g2", 0, 9, e2), []hit{{"c", 1}}); err != nil {
			t.Fatal(err)
		}
		if got := readCounters(t, ctx, pool); got["a"] != 3 || got["b"] != 1 || got["c"] != 2 {
			t.Fatalf("counters = %v, want a=3 b=1 c=2", got)
		}
		if n, _ := storedOffset(t, ctx, pool, "g", 0); n != 5 {
			t.Fatalf("stored for g = %d, want 5", n)
		}
		if n, _ := storedOffset(t, ctx, pool, "g2", 0); n != 9 {
			t.Fatalf("stored for g2 = %d, want 9", n)
		}
		// A claim returns the stored offset and an epoch above the stored one,
		// even for a smaller generation (a group deleted and recreated).
		if next, e, err := s.Claim(ctx, "g", "in", 0, 1); err != nil || next != 5 || e != epoch+1 {
			t.Fatalf("claim = %d, %d, %v; want 5, %d, nil", next, e, err, epoch+1)
		}
	})
}

// A batch that fails (a transient error after part of it was bisected and
// written) stores neither rows nor offset; without WithOffsets the part
// that was written before the error stays.
func TestOffsetsFailedBatchStoresNothing(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	eachPath(t, func(t *testing.T, path writePath) {
		// Sorted by key: a lands in the first half, b is refused (CHECK),
		// then boom fails with a transient error.
		batch := []hit{{"boom", 1}, {"a", 1}, {"b", -1}}

		ctx, pool, plain := countersSink(t, srv, path.opt)
		if err := plain.Write(ctx, batch); err == nil || !pgsink.IsTransient(err) {
			t.Fatalf("without offsets: Write = %v, want a transient error", err)
		}
		if got := readCounters(t, ctx, pool); got["a"] != 1 {
			t.Fatalf("without offsets: counters = %v, want a=1 (written before the error)", got)
		}

		ctx, pool, s := countersSink(t, srv, path.opt, pgsink.WithOffsets())
		_, epoch, err := s.Claim(ctx, "g", "in", 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Write(at("g", 0, 3, epoch), batch); err == nil || !pgsink.IsTransient(err) {
			t.Fatalf("with offsets: Write = %v, want a transient error", err)
		}
		if got := readCounters(t, ctx, pool); len(got) != 0 {
			t.Fatalf("with offsets: counters = %v, want none", got)
		}
		if n, _ := storedOffset(t, ctx, pool, "g", 0); n != -1 {
			t.Fatalf("with offsets: stored = %d, want -1 (claimed, nothing stored)", n)
		}
		// Rejections: the refused row is isolated in a savepoint, the rest
		// and the offset commit.
		err = s.Write(at("g", 0, 3, epoch), []hit{{"a", 1}, {"b", -1}, {"c", 1}})
		wantRejections(t, err, map[int]string{1: "pg.23514.counters_n_check"})
		if got := readCounters(t, ctx, pool); got["a"] != 1 || got["c"] != 1 || len(got) != 2 {
			t.Fatalf("counters = %v, want a=1 c=1", got)
		}
		if n, _ := storedOffset(t, ctx, pool, "g", 0); n != 3 {
			t.Fatalf("stored = %d, want 3", n)
		}
	})
}

// A member that lost its partition (a zombie) cannot write once the next
// owner claimed it: its batch is refused whole with ErrFenced.
func TestOffsetsFenceAZombie(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	eachPath(t, func(t *testing.T, path writePath) {
		ctx, pool, s := countersSink(t, srv, path.opt, pgsink.WithOffsets())
		_, old, err := s.Claim(ctx, "g", "in", 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Write(at("g", 0, 2, old), []hit{{"a", 1}, {"a", 1}}); err != nil {
			t.Fatal(err)
		}
		next, cur, err := s.Claim(ctx, "g", "in", 0, 1) // the new owner, same generation number
		if err != nil || next != 2 || cur <= old {
			t.Fatalf("claim = %d, %d, %v; want 2, > %d, nil", next, cur, err, old)
		}
		err = s.Write(at("g", 0, 4, old), []hit{{"a", 1}, {"b", 1}})
		if !errors.Is(err, pgsink.ErrFenced) {
			t.Fatalf("zombie's Write = %v, want ErrFenced", err)
		}
		if got := readCounters(t, ctx, pool); got["a"] != 2 || len(got) != 1 {
			t.Fatalf("counters = %v, want a=2 only", got)
		}
		if err := s.Write(at("g", 0, 4, cur), []hit{{"a", 1}, {"b", 1}, {"c", 0}}); err != nil {
			t.Fatal(err)
		}
		if got := readCounters(t, ctx, pool); got["a"] != 3 || got["b"] != 1 || got["c"] != 0 {
			t.Fatalf("counters = %v, want a=3 b=1 c=0", got)
		}
		if n, e := storedOffset(t, ctx, pool, "g", 0); n != 4 || e != cur {
			t.Fatalf("stored = %d (epoch %d), want 4 (epoch %d)", n, e, cur)
		}
		// Existing keys with a refused row: the bisection upserts through the
		// staging table in several savepoints of one transaction.
		err = s.Write(at("g", 0, 6, cur), []hit{{"a", 1}, {"b", -5}, {"c", 1}})
		wantRejections(t, err, map[int]string{1: "pg.23514.counters_n_check"})
		if got := readCounters(t, ctx, pool); got["a"] != 4 || got["b"] != 1 || got["c"] != 1 {
			t.Fatalf("counters = %v, want a=4 b=1 c=1", got)
		}
		// A Write without a position is a fatal error, and Claim needs
		// WithOffsets.
		if err := s.Write(ctx, []hit{{"a", 1}}); stages.Classify(err).Kind != stages.KindFatal {
			t.Fatalf("Write without a position = %v, want a fatal error", err)
		}
		_, _, plain := countersSink(t, srv, path.opt)
		if _, _, err := plain.Claim(ctx, "g", "in", 0, 1); err == nil {
			t.Fatal("Claim on a sink without WithOffsets succeeded")
		}
	})
}
