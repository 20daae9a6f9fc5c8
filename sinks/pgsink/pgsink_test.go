package pgsink_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
)

// item is a row of the test table
//
//	items(k text PRIMARY KEY, v numeric(5,2) CHECK (v >= 0), n int NOT NULL,
//	      note text, updated_at timestamptz NOT NULL DEFAULT now())
//
// upserted with v = new, n = GREATEST, note = COALESCE(new, old).
type item struct {
	K    string
	V    float64
	N    *int32
	Note *string
}

const itemsDDL = `CREATE TABLE items (
	k text PRIMARY KEY,
	v numeric(5,2) CHECK (v >= 0),
	n int NOT NULL,
	note text,
	updated_at timestamptz NOT NULL DEFAULT now())`

func n32(v int32) *int32   { return &v }
func str(s string) *string { return &s }

func itemsTable(name string) pgsink.Table[item] {
	return pgsink.Table[item]{
		Name:    name,
		Columns: []string{"k", "v", "n", "note"},
		Key:     []string{"k"},
		Update: []pgsink.Set{
			{Column: "v", Expr: "EXCLUDED.v"},
			{Column: "n", Expr: "GREATEST(t.n, EXCLUDED.n)"},
			{Column: "note", Expr: "COALESCE(EXCLUDED.note, t.note)"},
		},
		Touch: []string{"updated_at"},
		KeyOf: func(i item) string { return i.K },
		Merge: func(old, next item) item {
			out := next
			if old.N != nil && (next.N == nil || *old.N > *next.N) {
				out.N = old.N
			}
			if next.Note == nil {
				out.Note = old.Note
			}
			return out
		},
		Values: func(i item) []any { return []any{i.K, i.V, i.N, i.Note} },
	}
}

type stored struct {
	V       float64
	N       int32
	Note    *string
	Updated time.Time
	Xmin    uint32
}

func (s stored) String() string {
	note := "NULL"
	if s.Note != nil {
		note = *s.Note
	}
	return fmt.Sprintf("{v=%v n=%v note=%s updated=%s xmin=%d}", s.V, s.N, note, s.Updated.UTC().Format(time.RFC3339Nano), s.Xmin)
}

// num is a row of table nums (k int PRIMARY KEY, v int NOT NULL): int64
// fields, so that a test can pass values the int columns cannot take.
type num struct{ K, V int64 }

// numSink creates table nums in pool's schema and returns a sink for it
// that has already written the row {1, 1}.
func numSink(t *testing.T, ctx context.Context, pool *pgxpool.Pool, opts ...pgsink.Option) *pgsink.Sink[num] {
	t.Helper()
	if _, err := pool.Exec(ctx, "CREATE TABLE nums (k int PRIMARY KEY, v int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	s, err := pgsink.New(pool, pgsink.Table[num]{Name: "nums", Columns: []string{"k", "v"}, Key: []string{"k"},
		Update: []pgsink.Set{{Column: "v", Expr: "EXCLUDED.v"}},
		KeyOf:  func(r num) string { return fmt.Sprint(r.K) }, Values: func(r num) []any { return []any{r.K, r.V} }}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []num{{K: 1, V: 1}}); err != nil {
		t.Fatal(err)
	}
	return s
}

func readItems(t *testing.T, ctx context.Context, pool *pgxpool.Pool) map[string]stored {
	t.Helper()
	rows, err := pool.Query(ctx, "SELECT k, v::float8, n, note, updated_at, xmin::text::int8 FROM items")
	if err != nil {
		t.Fatalf("read items: %v", err)
	}
	out := map[string]stored{}
	for rows.Next() {
		var k string
		var s stored
		var xmin int64
		if err := rows.Scan(&k, &s.V, &s.N, &s.Note, &s.Updated, &xmin); err != nil {
			t.Fatalf("scan: %v", err)
		}
		s.Xmin = uint32(xmin)
		out[k] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read items: %v", err)
	}
	return out
}

// setup returns a fresh schema with the items table and a sink on it.
func setup(t *testing.T, srv *testkit.PostgresServer, opts ...pgsink.Option) (context.Context, *testkit.Postgres, *pgsink.Sink[item]) {
	t.Helper()
	pg := srv.Postgres(t)
	ctx := testkit.Context(t)
	if _, err := pg.Pool.Exec(ctx, itemsDDL); err != nil {
		t.Fatalf("create table: %v", err)
	}
	s, err := pgsink.New(pg.Pool, itemsTable("items"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, pg, s
}

func wantRejections(t *testing.T, err error, want map[int]string) {
	t.Helper()
	var rej *stages.Rejections
	if !errors.As(err, &rej) {
		t.Fatalf("want *stages.Rejections, got %v", err)
	}
	got := map[int]string{}
	for _, r := range rej.Items {
		got[r.Index] = r.Rule
		if r.Err == nil {
			t.Errorf("rejection %d has no error", r.Index)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rejections = %v, want %v (%v)", got, want, err)
	}
}

func TestSink(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	eachPath(t, func(t *testing.T, path writePath) { testSink(t, srv, path) })
}

func testSink(t *testing.T, srv *testkit.PostgresServer, path writePath) {

	t.Run("upsert merges in batch and across batches", func(t *testing.T) {
		t.Parallel()
		ctx, pg, s := setup(t, srv, path.opt)
		err := s.Write(ctx, []item{
			{K: "a", V: 1, N: n32(5), Note: str("first")},
			{K: "b", V: 2, N: n32(1)},
			{K: "a", V: 1.5, N: n32(3)}, // newer: v wins, n keeps 5, note kept
		})
		if err != nil {
			t.Fatal(err)
		}
		got := readItems(t, ctx, pg.Pool)
		if a := got["a"]; a.V != 1.5 || a.N != 5 || a.Note == nil || *a.Note != "first" {
			t.Errorf("a = %+v", a)
		}
		if b := got["b"]; b.V != 2 || b.N != 1 || b.Note != nil {
			t.Errorf("b = %+v", b)
		}
		if err := s.Write(ctx, []item{{K: "a", V: 0.25, N: n32(9), Note: str("second")}, {K: "b", V: 2, N: n32(0)}}); err != nil {
			t.Fatal(err)
		}
		got = readItems(t, ctx, pg.Pool)
		if a := got["a"]; a.V != 0.25 || a.N != 9 || a.Note == nil || *a.Note != "second" {
			t.Errorf("a after second batch = %+v", a)
		}
		if b := got["b"]; b.V != 2 || b.N != 1 {
			t.Errorf("b after second batch = %+v", b)
		}
		if len(got) != 2 {
			t.Errorf("rows = %d", len(got))
		}
	})

	t.Run("bad rows are rejected and the rest lands", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		ctx, pg, s := setup(t, srv, path.opt, pgsink.WithRegisterer(reg, "test"))
		var batch []item
		for i := range 16 {
			batch = append(batch, item{K: fmt.Sprintf("k%02d", i), V: float64(i), N: n32(int32(i))})
		}
		batch[5].V = 1000   // numeric(5,2) overflow: 22003, at COPY time
		batch[7].V = -1     // CHECK violation: 23514, at INSERT time
		batch[11].N = nil   // NOT NULL violation: 23502, at COPY time
		batch[12].K = "k03" // a later item of k03 that overflows: the merged
		batch[12].V = 1000  // row is refused, item 3 lands on its own, 12 is rejected
		err := s.Write(ctx, batch)
		wantRejections(t, err, map[int]string{5: "pg.22003", 7: "pg.23514.items_v_check", 11: "pg.23502", 12: "pg.22003"})
		got := readItems(t, ctx, pg.Pool)
		if len(got) != 12 {
			t.Errorf("landed %d rows, want 12: %v", len(got), got)
		}
		for i, it := range batch {
			_, ok := got[it.K]
			if want := i != 5 && i != 7 && i != 11; ok != want {
				t.Errorf("row %d (%s) landed = %v, want %v", i, it.K, ok, want)
			}
		}
		if got["k06"].V != 6 || got["k06"].N != 6 {
			t.Errorf("k06 = %+v", got["k06"])
		}
		if got["k03"].V != 3 {
			t.Errorf("k03 = %+v, want item 3's v=3", got["k03"])
		}
		if v := testkit.Metric(t, reg, "sluice_pgsink_rows_written_total"); v != 12 {
			t.Errorf("rows written metric = %v, want 12", v)
		}
		// 4 bad groups among 15: far fewer transactions than row by row
		// (plus one per item of the refused merged k03).
		txs := 0.0
		for _, r := range []string{"ok", "row_error"} {
			txs += testkit.Metric(t, reg, "sluice_pgsink_transactions_total", "result", r)
		}
		if txs > 22 {
			t.Errorf("bisection used %v transactions for 15 rows and 3 culprits", txs)
		}
		if v := testkit.Metric(t, reg, "sluice_pgsink_rows_rejected_total", "rule", "pg.22003", "pipeline", "test", "table", "items"); v != 2 {
			t.Errorf("rejected{pg.22003} = %v, want 2", v)
		}
	})

	t.Run("a batch of only bad rows rejects all and writes nothing", func(t *testing.T) {
		t.Parallel()
		ctx, pg, s := setup(t, srv, path.opt)
		err := s.Write(ctx, []item{{K: "x", V: -1, N: n32(1)}, {K: "y", V: 999.999, N: n32(1)}, {K: "z", V: 1}})
		wantRejections(t, err, map[int]string{0: "pg.23514.items_v_check", 1: "pg.22003", 2: "pg.23502"})
		if got := readItems(t, ctx, pg.Pool); len(got) != 0 {
			t.Errorf("rows = %v", got)
		}
	})

	t.Run("redelivery changes nothing", func(t *testing.T) {
		t.Parallel()
		ctx, pg, s := setup(t, srv, path.opt)
		batch := []item{{K: "a", V: 1, N: n32(2), Note: str("n")}, {K: "b", V: 3, N: n32(4)}, {K: "a", V: 2, N: n32(1)}}
		if err := s.Write(ctx, batch); err != nil {
			t.Fatal(err)
		}
		before := readItems(t, ctx, pg.Pool)
		for range 2 {
			if err := s.Write(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		after := readItems(t, ctx, pg.Pool)
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Errorf("redelivery changed rows (values, updated_at or xmin):\nbefore %v\nafter  %v", before, after)
		}
		// A real change still moves updated_at.
		if err := s.Write(ctx, []item{{K: "b", V: 3.5, N: n32(4)}}); err != nil {
			t.Fatal(err)
		}
		if b := readItems(t, ctx, pg.Pool)["b"]; b.V != 3.5 || !b.Updated.After(before["b"].Updated) {
			t.Errorf("b after change = %+v (before %+v)", b, before["b"])
		}
	})

	t.Run("schema errors are not row rejections", func(t *testing.T) {
		t.Parallel()
		ctx, pg, _ := setup(t, srv, path.opt)
		missing, err := pgsink.New(pg.Pool, itemsTable("no_such_table"), path.opt)
		if err != nil {
			t.Fatal(err)
		}
		err = missing.Write(ctx, []item{{K: "a", V: 1, N: n32(1)}})
		var rej *stages.Rejections
		if err == nil || errors.As(err, &rej) || pgsink.SQLState(err) != "42P01" || pgsink.IsTransient(err) {
			t.Fatalf("missing table: got %v", err)
		}
		// A NOT NULL column the sink does not write fails every row: a
		// schema mismatch, not a reason to dead-letter the batch.
		if _, err := pg.Pool.Exec(ctx, "ALTER TABLE items ADD COLUMN extra int NOT NULL"); err != nil {
			t.Fatal(err)
		}
		sink, err := pgsink.New(pg.Pool, itemsTable("items"), path.opt)
		if err != nil {
			t.Fatal(err)
		}
		err = sink.Write(ctx, []item{{K: "a", V: 1, N: n32(1)}, {K: "b", V: 1, N: n32(1)}})
		if err == nil || errors.As(err, &rej) || pgsink.SQLState(err) != "23502" {
			t.Fatalf("unwritten NOT NULL column: got %v", err)
		}
	})

	t.Run("transient errors are ordinary errors", func(t *testing.T) {
		t.Parallel()
		ctx, pg, _ := setup(t, srv, path.opt)
		// Nothing listens on a port we just closed.
		cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
		if err != nil {
			t.Fatal(err)
		}
		dead, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer dead.Close()
		s, err := pgsink.New(dead, itemsTable("items"), path.opt)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Write(ctx, []item{{K: "a", V: 1, N: n32(1)}})
		var rej *stages.Rejections
		if err == nil || errors.As(err, &rej) || !pgsink.IsTransient(err) {
			t.Fatalf("connection refused: got %v (transient %v)", err, pgsink.IsTransient(err))
		}
		if c := stages.Classify(err); c.Kind != stages.KindRetry {
			t.Errorf("classified %v, want retry", c.Kind)
		}

		// A backend terminated by an administrator under a transaction.
		conn, err := pg.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		var pid int32
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pg.Pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, "SELECT 1")
		if err == nil || !pgsink.IsTransient(err) {
			t.Fatalf("terminated backend: got %v (transient %v)", err, pgsink.IsTransient(err))
		}

		// A statement timeout.
		c2, err := pgx.Connect(ctx, pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close(ctx)
		_, err = c2.Exec(ctx, "SET statement_timeout = '50ms'; SELECT pg_sleep(1)")
		if pgsink.SQLState(err) != "57014" || !pgsink.IsTransient(err) {
			t.Fatalf("statement timeout: got %v", err)
		}
	})

	t.Run("concurrent writers on overlapping keys do not deadlock", func(t *testing.T) {
		t.Parallel()
		ctx, pg, s := setup(t, srv, path.opt)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := range 4 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 9))
				for range 15 {
					var batch []item
					for _, k := range r.Perm(40) {
						batch = append(batch, item{K: fmt.Sprintf("k%02d", k), V: float64(r.IntN(100)), N: n32(int32(r.IntN(100)))})
					}
					if err := s.Write(ctx, batch); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent write: %v", err)
		}
		if got := readItems(t, ctx, pg.Pool); len(got) != 40 {
			t.Errorf("rows = %d", len(got))
		}
	})

	// New keys are COPYed into the table and existing ones upserted when
	// at least 3/4 of the keys (first of a sample of 64 in batches of more
	// than 128) are new; otherwise everything is upserted. Either way the
	// rows must be those of the upsert.
	for _, tc := range []struct{ keys, existing int }{
		{8, 2}, {8, 6}, {300, 0}, {300, 30}, {300, 270}, {300, 300},
	} {
		t.Run(fmt.Sprintf("%d keys of which %d exist", tc.keys, tc.existing), func(t *testing.T) {
			t.Parallel()
			ctx, pg, s := setup(t, srv, path.opt)
			r := rand.New(rand.NewPCG(uint64(tc.keys), uint64(tc.existing)))
			perm := r.Perm(tc.keys)
			var old []item
			for _, i := range perm[:tc.existing] {
				old = append(old, item{K: fmt.Sprintf("k%03d", i), V: 1, N: n32(5), Note: str("kept")})
			}
			if len(old) > 0 {
				if err := s.Write(ctx, old); err != nil {
					t.Fatal(err)
				}
			}
			before := readItems(t, ctx, pg.Pool)
			var batch []item
			for _, i := range r.Perm(tc.keys) {
				batch = append(batch, item{K: fmt.Sprintf("k%03d", i), V: 2, N: n32(2)})
			}
			// A second item of one key: v and n merged in memory.
			batch = append(batch, item{K: batch[0].K, V: 3, N: n32(1)})
			if err := s.Write(ctx, batch); err != nil {
				t.Fatal(err)
			}
			got := readItems(t, ctx, pg.Pool)
			if len(got) != tc.keys {
				t.Errorf("rows = %d, want %d", len(got), tc.keys)
			}
			for _, it := range batch[:tc.keys] {
				r, ok := got[it.K]
				want := stored{V: 2, N: 2}
				if it.K == batch[0].K {
					want.V = 3
				}
				if b, existed := before[it.K]; existed {
					want.N, want.Note = 5, b.Note
					if !r.Updated.After(b.Updated) {
						t.Errorf("%s: updated_at did not move", it.K)
					}
				}
				if !ok || r.V != want.V || r.N != want.N || (r.Note == nil) != (want.Note == nil) || r.Note != nil && *r.Note != *want.Note {
					t.Errorf("%s = %v (landed %v), want %v", it.K, r, ok, want)
				}
			}
		})
	}

	t.Run("rejections index the caller's batch whatever the key order", func(t *testing.T) {
		t.Parallel()
		ctx, pg, s := setup(t, srv, path.opt)
		var old []item
		for i := range 4 {
			old = append(old, item{K: fmt.Sprintf("k%02d", i), V: 1, N: n32(1)})
		}
		if err := s.Write(ctx, old); err != nil {
			t.Fatal(err)
		}
		// k15 … k00: k00–k03 exist (upserted through staging), k04–k15
		// are new (copied into the table).
		var batch []item
		for i := 15; i >= 0; i-- {
			batch = append(batch, item{K: fmt.Sprintf("k%02d", i), V: 2, N: n32(int32(i))})
		}
		batch[12].V = -1  // k03, existing: CHECK violation on update
		batch[3].V = 1000 // k12, new: numeric overflow
		batch[5].N = nil  // k10, new: NOT NULL violation
		// index 16: new k06 merged into a refused row; k06's valid item 9
		// lands on its own.
		batch = append(batch, item{K: "k06", V: -1, N: n32(1)})
		err := s.Write(ctx, batch)
		wantRejections(t, err, map[int]string{3: "pg.22003", 5: "pg.23502", 12: "pg.23514.items_v_check", 16: "pg.23514.items_v_check"})
		got := readItems(t, ctx, pg.Pool)
		for i, it := range batch[:16] {
			r, ok := got[it.K]
			switch it.K {
			case "k03":
				if !ok || r.V != 1 {
					t.Errorf("refused update of %s changed the row: %v", it.K, r)
				}
			case "k10", "k12":
				if ok {
					t.Errorf("refused new row %s landed: %v", it.K, r)
				}
			default:
				if !ok || r.V != 2 || r.N != max(1, *it.N) {
					t.Errorf("row %d (%s) = %v (landed %v), want v=2 n=%d", i, it.K, r, ok, max(1, *it.N))
				}
			}
		}
		if len(got) != 14 {
			t.Errorf("rows = %d, want 14", len(got))
		}
	})

	t.Run("a key inserted concurrently falls back to the upsert", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		ctx, pg, s := setup(t, srv, path.opt, pgsink.WithRegisterer(reg, "test"))
		// Another transaction inserts b and holds it uncommitted: the
		// sink's lookup does not see b, its COPY waits for the other
		// transaction and then hits the unique index. (The INSERT … VALUES
		// waits for the other transaction and then updates b.)
		other, err := pg.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Rollback(context.WithoutCancel(ctx))
		if _, err := other.Exec(ctx, "INSERT INTO items (k, v, n, note) VALUES ('b', 1, 7, 'theirs')"); err != nil {
			t.Fatal(err)
		}
		var pid int32
		if err := other.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			done <- s.Write(ctx, []item{{K: "a", V: 2, N: n32(1)}, {K: "b", V: 3, N: n32(2)}, {K: "c", V: 4, N: n32(3)}})
		}()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var waiting int
			if err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pid).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting > 0 {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("write finished without waiting for the other transaction: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("the sink never waited for the other transaction")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := other.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("write: %v", err)
		}
		got := readItems(t, ctx, pg.Pool)
		if b := got["b"]; b.V != 3 || b.N != 7 || b.Note == nil || *b.Note != "theirs" {
			t.Errorf("b = %v, want the upsert of both (v=3 n=7 note=theirs)", b)
		}
		if len(got) != 3 || got["a"].V != 2 || got["c"].V != 4 {
			t.Errorf("rows = %v", got)
		}
		wantTxs := map[string]float64{"conflict": 1, "ok": 1, "row_error": 0}
		if path.name == insertPath {
			wantTxs["conflict"] = 0 // no lookup, no direct COPY
		}
		for result, want := range wantTxs {
			if v := testkit.Metric(t, reg, "sluice_pgsink_transactions_total", "result", result); v != want {
				t.Errorf("transactions{%s} = %v, want %v", result, v, want)
			}
		}
	})

	t.Run("a unique violation on another index is rejected", func(t *testing.T) {
		t.Parallel()
		ctx, pg, s := setup(t, srv, path.opt)
		if _, err := pg.Pool.Exec(ctx, "ALTER TABLE items ADD CONSTRAINT items_note_key UNIQUE (note)"); err != nil {
			t.Fatal(err)
		}
		if err := s.Write(ctx, []item{{K: "a", V: 1, N: n32(1), Note: str("x")}}); err != nil {
			t.Fatal(err)
		}
		err := s.Write(ctx, []item{{K: "c", V: 1, N: n32(1), Note: str("y")}, {K: "b", V: 1, N: n32(1), Note: str("x")}})
		wantRejections(t, err, map[int]string{1: "pg.23505.items_note_key"})
		got := readItems(t, ctx, pg.Pool)
		if _, ok := got["b"]; ok || len(got) != 2 || got["c"].Note == nil || *got["c"].Note != "y" {
			t.Errorf("rows = %v", got)
		}
	})

	// pgx encodes COPY values on the client; a value it cannot encode for
	// its column aborts the COPY (the server answers 57014, which also
	// means a statement timeout). No retry can change that: the row is
	// rejected and the rest lands, also when the value is a key (the lookup
	// of existing keys cannot encode it either).
	t.Run("values the client cannot encode are rejected, not retried", func(t *testing.T) {
		t.Parallel()
		pg := srv.Postgres(t)
		ctx := testkit.Context(t)
		s := numSink(t, ctx, pg.Pool, path.opt)
		for _, tc := range []struct {
			name  string
			batch []num
			want  map[int]string
		}{
			{"a value", []num{{K: 1, V: 10}, {K: 2, V: 1 << 40}, {K: 3, V: 30}, {K: 4, V: 40}}, map[int]string{1: "pg.encode"}},
			{"a key", []num{{K: 5, V: 50}, {K: 1 << 40, V: 1}, {K: 6, V: 60}, {K: 7, V: 70}}, map[int]string{1: "pg.encode"}},
			{"an existing key's value", []num{{K: 3, V: -1 << 40}, {K: 8, V: 80}}, map[int]string{0: "pg.encode"}},
		} {
			err := s.Write(ctx, tc.batch)
			wantRejections(t, err, tc.want)
			for _, it := range err.(*stages.Rejections).Items {
				if !pgsink.IsPermanent(it.Err) || pgsink.IsTransient(it.Err) {
					t.Errorf("%s: IsPermanent %v, IsTransient %v (%v)", tc.name, pgsink.IsPermanent(it.Err), pgsink.IsTransient(it.Err), it.Err)
				}
			}
		}
		got := map[int64]int64{}
		rows, err := pg.Pool.Query(ctx, "SELECT k, v FROM nums")
		if err != nil {
			t.Fatal(err)
		}
		var k, v int64
		if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { got[k] = v; return nil }); err != nil {
			t.Fatal(err)
		}
		if want := map[int64]int64{1: 10, 3: 30, 4: 40, 5: 50, 6: 60, 7: 70, 8: 80}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("rows = %v, want %v", got, want)
		}
	})

	t.Run("empty batch touches nothing", func(t *testing.T) {
		t.Parallel()
		s, err := pgsink.New(noDB{}, itemsTable("items"), path.opt)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Write(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	})
}

// noDB fails every Begin.
type noDB struct{}

func (noDB) Begin(context.Context) (pgx.Tx, error) { return nil, errors.New("no database") }

func TestTableChecks(t *testing.T) {
	t.Parallel()
	good := itemsTable("items")
	cases := map[string]func(*pgsink.Table[item]){
		"no name":            func(tb *pgsink.Table[item]) { tb.Name = "" },
		"no columns":         func(tb *pgsink.Table[item]) { tb.Columns = nil },
		"no key":             func(tb *pgsink.Table[item]) { tb.Key = nil },
		"key not written":    func(tb *pgsink.Table[item]) { tb.Key = []string{"zzz"} },
		"no values function": func(tb *pgsink.Table[item]) { tb.Values = nil },
	}
	for name, mutate := range cases {
		tb := good
		mutate(&tb)
		if _, err := pgsink.New(noDB{}, tb); err == nil {
			t.Errorf("%s: New accepted the table", name)
		}
	}
	if _, err := pgsink.New(nil, good); err == nil {
		t.Error("New accepted a nil database")
	}
}

func TestUpsertSQL(t *testing.T) {
	t.Parallel()
	s, err := pgsink.New(noDB{}, itemsTable("app.items"))
	if err != nil {
		t.Fatal(err)
	}
	want := `INSERT INTO "app"."items" AS t ("k", "v", "n", "note")
SELECT "k", "v", "n", "note" FROM "_pgsink_staging"
ON CONFLICT ("k") DO UPDATE SET
  "v" = EXCLUDED.v,
  "n" = GREATEST(t.n, EXCLUDED.n),
  "note" = COALESCE(EXCLUDED.note, t.note),
  "updated_at" = now()
WHERE (t."v", t."n", t."note") IS DISTINCT FROM (EXCLUDED.v, GREATEST(t.n, EXCLUDED.n), COALESCE(EXCLUDED.note, t.note))`
	if got := s.UpsertSQL(); got != want {
		t.Errorf("UpsertSQL =\n%s\nwant\n%s", got, want)
	}
	tb := itemsTable("items")
	tb.Update, tb.Touch = nil, nil
	s, _ = pgsink.New(noDB{}, tb)
	if !strings.HasSuffix(s.UpsertSQL(), `ON CONFLICT ("k") DO NOTHING`) {
		t.Errorf("no Update: %s", s.UpsertSQL())
	}
	tb = itemsTable("items")
	tb.UpdateUnchanged = true
	s, _ = pgsink.New(noDB{}, tb)
	if strings.Contains(s.UpsertSQL(), "IS DISTINCT FROM") {
		t.Errorf("UpdateUnchanged: %s", s.UpsertSQL())
	}
}

func TestMetricsShareARegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	for _, name := range []string{"a", "b", "a"} { // the second "a" reuses the series
		if _, err := pgsink.New(noDB{}, itemsTable(name), pgsink.WithRegisterer(reg, "p")); err != nil {
			t.Fatalf("sink %s: %v", name, err)
		}
	}
	if _, err := pgsink.New(noDB{}, itemsTable("a"), pgsink.WithRegisterer(reg, "other")); err != nil {
		t.Fatal(err)
	}
	s, err := pgsink.New(noDB{}, itemsTable("a"), pgsink.WithRegisterer(reg, "p"))
	if err != nil {
		t.Fatal(err)
	}
	// a failed write is observed under result="error"
	if err := s.Write(context.Background(), []item{{K: "x"}}); err == nil {
		t.Fatal("write without a database succeeded")
	}
	if v := testkit.Metric(t, reg, "sluice_pgsink_transactions_total", "pipeline", "p", "table", "a", "result", "error"); v != 1 {
		t.Errorf("transactions{error} = %v", v)
	}
	if v := testkit.Metric(t, reg, "sluice_pgsink_batch_size", "pipeline", "p", "table", "a"); v != 1 {
		t.Errorf("batch size observations = %v", v)
	}
}

// closing is a row of closes(symbol text, day date, close float8,
// first_seen timestamptz, PRIMARY KEY (symbol, day)): a two-column key.
type closing struct {
	Symbol    string
	Day       time.Time
	Close     float64
	FirstSeen time.Time
}

func TestSinkCompositeKey(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, path writePath) {
		pg := testkit.NewPostgres(t)
		ctx := testkit.Context(t)
		if _, err := pg.Pool.Exec(ctx, `CREATE TABLE closes (symbol text, day date, close float8,
			first_seen timestamptz, PRIMARY KEY (symbol, day))`); err != nil {
			t.Fatal(err)
		}
		s, err := pgsink.New(pg.Pool, pgsink.Table[closing]{
			Name:    pg.Schema + ".closes",
			Columns: []string{"close", "day", "symbol", "first_seen"},
			Key:     []string{"symbol", "day"},
			Update: []pgsink.Set{
				{Column: "close", Expr: "EXCLUDED.close"},
				{Column: "first_seen", Expr: "LEAST(t.first_seen, EXCLUDED.first_seen)"},
			},
			KeyOf:  func(c closing) string { return c.Symbol + "|" + c.Day.Format(time.DateOnly) },
			Values: func(c closing) []any { return []any{c.Close, c.Day, c.Symbol, c.FirstSeen} },
		}, path.opt)
		if err != nil {
			t.Fatal(err)
		}
		day := func(d int) time.Time { return time.Date(2025, 3, d, 0, 0, 0, 0, time.UTC) }
		seen := func(h int) time.Time { return time.Date(2025, 3, 10, h, 0, 0, 0, time.UTC) }
		if err := s.Write(ctx, []closing{{"AAA", day(1), 10, seen(5)}, {"BBB", day(1), 20, seen(5)}}); err != nil {
			t.Fatal(err)
		}
		// AAA/1 exists (close changes, first_seen keeps the earliest), BBB/1
		// exists and gets an earlier first_seen; the other six are new (3/4 of
		// the batch: they are COPYed).
		if err := s.Write(ctx, []closing{
			{"BBB", day(2), 21, seen(9)}, {"AAA", day(1), 11, seen(7)}, {"AAA", day(2), 12, seen(8)}, {"BBB", day(1), 20, seen(1)},
			{"CCC", day(1), 30, seen(2)}, {"CCC", day(2), 31, seen(3)}, {"AAA", day(3), 13, seen(4)}, {"BBB", day(3), 22, seen(6)},
		}); err != nil {
			t.Fatal(err)
		}
		rows, err := pg.Pool.Query(ctx, "SELECT symbol, day, close, first_seen FROM closes ORDER BY symbol, day")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		var c closing
		if _, err := pgx.ForEachRow(rows, []any{&c.Symbol, &c.Day, &c.Close, &c.FirstSeen}, func() error {
			got = append(got, fmt.Sprintf("%s %s %v %02d", c.Symbol, c.Day.Format(time.DateOnly), c.Close, c.FirstSeen.UTC().Hour()))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want := []string{"AAA 2025-03-01 11 05", "AAA 2025-03-02 12 08", "AAA 2025-03-03 13 04",
			"BBB 2025-03-01 20 01", "BBB 2025-03-02 21 09", "BBB 2025-03-03 22 06", "CCC 2025-03-01 30 02", "CCC 2025-03-02 31 03"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("closes =\n%v\nwant\n%v", got, want)
		}
	})
}

// The lookup of existing keys sends arrays of []any: it must work whatever
// query exec mode the caller's pool uses.
func TestSinkQueryExecModes(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			eachPath(t, func(t *testing.T, path writePath) {
				pg := srv.Postgres(t)
				ctx := testkit.Context(t)
				if _, err := pg.Pool.Exec(ctx, itemsDDL); err != nil {
					t.Fatal(err)
				}
				cfg, err := pgxpool.ParseConfig(pg.URL)
				if err != nil {
					t.Fatal(err)
				}
				cfg.ConnConfig.DefaultQueryExecMode = mode
				pool, err := pgxpool.NewWithConfig(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer pool.Close()
				s, err := pgsink.New(pool, itemsTable("items"), path.opt)
				if err != nil {
					t.Fatal(err)
				}
				for _, batch := range [][]item{
					{{K: "a", V: 1, N: n32(1)}, {K: "b", V: 2, N: n32(2)}}, // new
					{{K: "b", V: 3, N: n32(1)}, {K: "c", V: 4, N: n32(4)}}, // existing and new
					{{K: "a", V: 5, N: n32(1)}},                            // existing
				} {
					if err := s.Write(ctx, batch); err != nil {
						t.Fatal(err)
					}
				}
				got := readItems(t, ctx, pg.Pool)
				if len(got) != 3 || got["a"].V != 5 || got["b"].V != 3 || got["b"].N != 2 || got["c"].V != 4 {
					t.Errorf("rows = %v", got)
				}
			})
		})
	}
}

// The server translates its answer to a COPY the client aborted into the
// session's lc_messages. A value pgx cannot encode is still rejected as
// pg.encode (not retried as a statement timeout) when that answer is not
// in English. Needs a server on which the session may set lc_messages to
// de_DE.UTF-8 (a superuser, the locale installed); skipped otherwise.
func TestSinkEncodeRejectionUnderAnotherLocale(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, path writePath) {
		pg := testkit.NewPostgresServer(t).Postgres(t)
		ctx := testkit.Context(t)
		const lcMessages = "SET lc_messages = 'de_DE.UTF-8'"
		if _, err := pg.Pool.Exec(ctx, lcMessages); err != nil {
			t.Skipf("cannot set lc_messages to de_DE.UTF-8 on this server: %v", err)
		}
		cfg, err := pgxpool.ParseConfig(pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, lcMessages)
			return err
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		s := numSink(t, ctx, pool, path.opt)
		for _, tc := range []struct {
			name  string
			batch []num
			want  map[int]string
		}{
			{"a new key's value (direct COPY)", []num{{K: 2, V: 20}, {K: 3, V: 1 << 40}, {K: 4, V: 40}, {K: 5, V: 50}}, map[int]string{1: "pg.encode"}},
			{"a key (staging COPY)", []num{{K: 6, V: 60}, {K: 1 << 40, V: 1}, {K: 7, V: 70}}, map[int]string{1: "pg.encode"}},
			{"an existing key's value (staging COPY)", []num{{K: 1, V: -1 << 40}, {K: 8, V: 80}}, map[int]string{0: "pg.encode"}},
		} {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := s.Write(wctx, tc.batch)
			cancel()
			wantRejections(t, err, tc.want)
			for _, it := range err.(*stages.Rejections).Items {
				if strings.Contains(it.Err.Error(), "COPY from stdin failed") {
					t.Fatalf("%s: the server answered in English (%v): lc_messages did not take", tc.name, it.Err)
				}
				if !pgsink.IsPermanent(it.Err) || pgsink.IsTransient(it.Err) {
					t.Errorf("%s: IsPermanent %v, IsTransient %v (%v)", tc.name, pgsink.IsPermanent(it.Err), pgsink.IsTransient(it.Err), it.Err)
				}
			}
		}
		got := map[int64]int64{}
		rows, err := pool.Query(ctx, "SELECT k, v FROM nums")
		if err != nil {
			t.Fatal(err)
		}
		var k, v int64
		if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { got[k] = v; return nil }); err != nil {
			t.Fatal(err)
		}
		if want := map[int64]int64{1: 1, 2: 20, 4: 40, 5: 50, 6: 60, 7: 70, 8: 80}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("rows = %v, want %v", got, want)
		}
	})
}
