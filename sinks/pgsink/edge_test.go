package pgsink_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
)

// A valid item merged with a later item of its key that PostgreSQL refuses
// lands as in a batch of its own; only the refused item is rejected. A
// refused item superseded by a later one (the merged row lands) is not
// checked on its own.
func TestSinkMergedKeyWithARefusedItem(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	eachPath(t, func(t *testing.T, path writePath) {
		ctx, pg, s := setup(t, srv, path.opt)
		batch := []item{
			{K: "a", V: 1, N: n32(1), Note: str("first")},
			{K: "b", V: 2, N: n32(2)},
			{K: "a", V: -1, N: n32(3)}, // CHECK violation, superseded by item 3
			{K: "a", V: 4, N: n32(2)},
			{K: "c", V: 5, N: n32(1)},    // valid, new key
			{K: "c", V: 1000, N: n32(1)}, // numeric overflow
			{K: "d", V: 1, N: n32(1)},
			{K: "d", V: 2, N: nil}, // NOT NULL violation
			{K: "d", V: 3, N: n32(4), Note: str("d")},
			{K: "d", V: -2, N: n32(5)}, // CHECK violation, the newest of d
		}
		err := s.Write(ctx, batch)
		wantRejections(t, err, map[int]string{5: "pg.22003", 7: "pg.23502", 9: "pg.23514.items_v_check"})
		got := readItems(t, ctx, pg.Pool)
		if a := got["a"]; a.V != 4 || a.N != 3 || a.Note == nil || *a.Note != "first" {
			t.Errorf("a = %v, want v=4 n=3 note=first", a)
		}
		if b := got["b"]; b.V != 2 {
			t.Errorf("b = %v, want v=2", b)
		}
		if c, ok := got["c"]; !ok || c.V != 5 {
			t.Errorf("c = %v (landed %v), want v=5", c, ok)
		}
		if d, ok := got["d"]; !ok || d.V != 3 || d.N != 4 || d.Note == nil || *d.Note != "d" {
			t.Errorf("d = %v (landed %v), want v=3 n=4 note=d", d, ok)
		}
	})
}

// A session that PostgreSQL ends for idling, in a transaction or not, is a
// transient failure: a retry on another connection gets past it.
func TestSessionTimeoutsAreTransient(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	pg := srv.Postgres(t)
	ctx := testkit.Context(t)
	for _, set := range []string{"idle_in_transaction_session_timeout", "idle_session_timeout"} {
		conn, err := pg.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := conn.Hijack()
		if _, err := c.Exec(ctx, "SET "+set+" = '100ms'"); err != nil {
			t.Fatal(err)
		}
		if set == "idle_in_transaction_session_timeout" {
			if _, err := c.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(400 * time.Millisecond)
		_, err = c.Exec(ctx, "SELECT 1")
		if err == nil || !pgsink.IsTransient(err) || pgsink.IsPermanent(err) {
			t.Errorf("%s expired: %v (SQLSTATE %q), want transient", set, err, pgsink.SQLState(err))
		}
		_ = c.Close(ctx)
	}
}

// A write whose context ends midway returns an error that is no rejection
// and commits nothing.
func TestSinkCancelledMidWrite(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	_, pg, s := setup(t, srv)
	var batch []item
	for i := range 200000 {
		batch = append(batch, item{K: fmt.Sprintf("k%07d", i), V: 1, N: n32(1)})
	}
	for _, d := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		err := s.Write(ctx, batch)
		cancel()
		var rej *stages.Rejections
		n := 0
		if err := pg.Pool.QueryRow(context.Background(), "SELECT count(*) FROM items").Scan(&n); err != nil {
			t.Fatal(err)
		}
		switch {
		case err == nil && n != len(batch):
			t.Errorf("write returned nil with %d of %d rows", n, len(batch))
		case err != nil && errors.As(err, &rej):
			// Any other error is fine: the runtime retries it. pgx reports the
			// cancellation as the deadline or, when it closed the connection
			// mid-COPY first, as "use of closed network connection".
			t.Errorf("cancelled write: %v, want an ordinary (retried) error, not a rejection", err)
		case err != nil && n != 0:
			t.Errorf("cancelled write committed %d rows", n)
		}
		if _, err := pg.Pool.Exec(context.Background(), "TRUNCATE items"); err != nil {
			t.Fatal(err)
		}
	}
}

// Upper case, quotes and blanks in schema, table and column names are
// quoted everywhere (lookup, staging table, COPY, upsert).
func TestSinkQuotedSchemaQualifiedNames(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	eachPath(t, func(t *testing.T, path writePath) {
		pg := srv.Postgres(t)
		ctx := testkit.Context(t)
		schema := `Odd "S ` + testkit.Name(t, "q")[len(testkit.Name(t, "q"))-12:]
		qs := pgx.Identifier{schema}.Sanitize()
		if _, err := pg.Pool.Exec(ctx, `CREATE SCHEMA `+qs+`; CREATE TABLE `+qs+`."My""Items" ("K" text PRIMARY KEY, "Val" int NOT NULL, "t" timestamptz)`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = pg.Pool.Exec(context.Background(), `DROP SCHEMA `+qs+` CASCADE`) })
		type row struct {
			k string
			v int
		}
		s, err := pgsink.New(pg.Pool, pgsink.Table[row]{
			Name: schema + `.My"Items`, Columns: []string{"K", "Val"}, Key: []string{"K"},
			Update: []pgsink.Set{{Column: "Val", Expr: `EXCLUDED."Val"`}}, Touch: []string{"t"},
			KeyOf: func(r row) string { return r.k }, Values: func(r row) []any { return []any{r.k, r.v} },
		}, path.opt)
		if err != nil {
			t.Fatal(err)
		}
		for v := range 3 { // direct COPY, then upserts
			var b []row
			for i := range 300 {
				b = append(b, row{fmt.Sprint(i), v})
			}
			if err := s.Write(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		var n, sum int
		if err := pg.Pool.QueryRow(ctx, `SELECT count(*), sum("Val") FROM `+qs+`."My""Items"`).Scan(&n, &sum); err != nil {
			t.Fatal(err)
		}
		if n != 300 || sum != 600 {
			t.Fatalf("rows = %d, sum = %d, want 300 and 600", n, sum)
		}
	})
}

// Two sinks writing the same new keys at once both succeed (the one whose
// direct COPY meets the other's keys falls back to the upsert) and leave
// the merged rows.
func TestTwoSinksWriteTheSameNewKeys(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	eachPath(t, func(t *testing.T, path writePath) {
		ctx, pg, _ := setup(t, srv, path.opt)
		for round := range 20 {
			var wg sync.WaitGroup
			for w := range 2 {
				s, err := pgsink.New(pg.Pool, itemsTable("items"), path.opt)
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					var b []item
					for i := range 200 {
						it := item{K: fmt.Sprintf("r%02dk%03d", round, i), V: 1, N: n32(int32(w + 1))}
						if w == 0 {
							it.Note = str("w0")
						}
						b = append(b, it)
					}
					if err := s.Write(ctx, b); err != nil {
						t.Errorf("writer %d: %v", w, err)
					}
				})
			}
			wg.Wait()
		}
		got := readItems(t, ctx, pg.Pool)
		if len(got) != 20*200 {
			t.Errorf("rows = %d, want %d", len(got), 20*200)
		}
		for k, r := range got {
			if r.N != 2 || r.Note == nil || *r.Note != "w0" {
				t.Fatalf("%s = %v, want the merged row n=2 note=w0", k, r)
			}
		}
	})
}
