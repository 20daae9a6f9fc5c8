package pgsink_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/pgsink"
)

// Table.Where keeps the rows it does not accept out of the table, new keys
// included (which the direct COPY would otherwise write without a
// statement to filter them); WriteCount counts the rows inserted or
// updated, not those Where skipped nor unchanged updates.
func TestWhereAndWriteCount(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	eachPath(t, func(t *testing.T, path writePath) {
		pg := srv.Postgres(t)
		ctx := testkit.Context(t)
		if _, err := pg.Pool.Exec(ctx, itemsDDL+`; CREATE TABLE blocked (k text PRIMARY KEY); INSERT INTO blocked VALUES ('b'), ('d')`); err != nil {
			t.Fatal(err)
		}
		table := itemsTable("items")
		table.Where = "NOT EXISTS (SELECT 1 FROM blocked WHERE blocked.k = s.k)"
		s, err := pgsink.New(pg.Pool, table, path.opt)
		if err != nil {
			t.Fatal(err)
		}
		n, err := s.WriteCount(ctx, []item{{K: "a", V: 1, N: n32(1)}, {K: "b", V: 2, N: n32(1)}, {K: "c", V: 3, N: n32(1)}, {K: "c", V: 4, N: n32(1)}, {K: "d", V: 5, N: n32(1)}})
		if err != nil || n != 2 {
			t.Fatalf("first write: %d, %v; want 2 rows (a, c merged), b and d skipped", n, err)
		}
		got := readItems(t, ctx, pg.Pool)
		if len(got) != 2 || got["a"].V != 1 || got["c"].V != 4 {
			t.Fatalf("rows %v, want a=1 and c=4 only", got)
		}
		// a changes, c is written unchanged, b is still blocked.
		n, err = s.WriteCount(ctx, []item{{K: "a", V: 7, N: n32(1)}, {K: "b", V: 2, N: n32(1)}, {K: "c", V: 4, N: n32(1)}})
		if err != nil || n != 1 {
			t.Fatalf("second write: %d, %v; want 1 row (a)", n, err)
		}
		if got := readItems(t, ctx, pg.Pool); len(got) != 2 || got["a"].V != 7 {
			t.Fatalf("rows %v, want a=7 and c", got)
		}
	})
}

// Table.Fallback replaces a refused item's row; the item is rejected only
// when Fallback declines or its row is refused too (with that refusal),
// and the rest of the batch lands either way.
func TestFallback(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	eachPath(t, func(t *testing.T, path writePath) {
		pg := srv.Postgres(t)
		ctx := testkit.Context(t)
		if _, err := pg.Pool.Exec(ctx, itemsDDL); err != nil {
			t.Fatal(err)
		}
		table := itemsTable("items")
		var offered []string
		table.Fallback = func(r item, refusal error) (item, bool) {
			offered = append(offered, r.K+":"+pgsink.SQLState(refusal))
			if pgsink.SQLState(refusal) == "22003" {
				return r, false
			}
			r.V, r.Note = 0, str("fallback")
			return r, true
		}
		s, err := pgsink.New(pg.Pool, table, path.opt)
		if err != nil {
			t.Fatal(err)
		}
		n, err := s.WriteCount(ctx, []item{
			{K: "a", V: 1, N: n32(1)},
			{K: "b", V: -1, N: n32(1)}, // CHECK violation: the fallback lands
			{K: "d", V: -1},            // the fallback breaks NOT NULL as well
			{K: "e", V: 1000, N: n32(1)},
			{K: "f", V: 2, N: n32(1)},
		})
		wantRejections(t, err, map[int]string{2: "pg.23502", 3: "pg.22003"})
		if n != 3 {
			t.Errorf("count %d, want 3 (a, b's fallback, f)", n)
		}
		got := readItems(t, ctx, pg.Pool)
		if b := got["b"]; len(got) != 3 || got["a"].V != 1 || got["f"].V != 2 || b.V != 0 || b.Note == nil || *b.Note != "fallback" {
			t.Fatalf("rows %v, want a=1, b=0 (fallback), f=2", got)
		}
		// Offered once per refused item: b, d (not d's fallback again), e.
		if len(offered) != 3 || offered[0][:2] != "b:" || offered[1][:2] != "d:" || offered[2] != "e:22003" {
			t.Fatalf("fallback offered %v, want b, d, e once each", offered)
		}
	})
}
