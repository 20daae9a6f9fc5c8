package pgsink_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/pgsink"
)

// installCitext installs the citext extension into pg_catalog, where every
// schema of the database sees it (an extension exists once per database:
// installed in a test's schema it would be invisible to the others and
// dropped with that schema). A concurrent first install elsewhere is
// waited for.
func installCitext(t *testing.T, ctx context.Context, pool interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		_, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS citext SCHEMA pg_catalog")
		var pe *pgconn.PgError
		if err == nil {
			return
		}
		if attempt < 3 && errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42710") {
			continue // lost the race with another test's install
		}
		t.Fatalf("install citext: %v", err)
	}
}

type tickerRow struct {
	Ticker, Module string
	V              int64
}

// A citext key: the lookup of existing keys (arrays of the key columns'
// types) is encoded although pgx knows no citext type, so new keys are
// COPYed straight into the table; rows whose keys differ only in case land
// on one row.
func TestSinkCitextKey(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, path writePath) {
		pg := testkit.NewPostgres(t)
		ctx := testkit.Context(t)
		installCitext(t, ctx, pg.Pool)
		if _, err := pg.Pool.Exec(ctx, `CREATE TABLE modules (ticker citext, module text, v bigint NOT NULL,
			PRIMARY KEY (ticker, module))`); err != nil {
			t.Fatal(err)
		}
		s, err := pgsink.New(pg.Pool, pgsink.Table[tickerRow]{
			Name: "modules", Columns: []string{"ticker", "module", "v"}, Key: []string{"ticker", "module"},
			Update: []pgsink.Set{{Column: "v", Expr: "EXCLUDED.v"}},
			// The key folds case as the citext column compares.
			KeyOf:  func(r tickerRow) string { return strings.ToUpper(r.Ticker) + ":" + r.Module },
			Values: func(r tickerRow) []any { return []any{r.Ticker, r.Module, r.V} },
		}, path.opt)
		if err != nil {
			t.Fatal(err)
		}
		read := func() map[string]int64 {
			t.Helper()
			rows, err := pg.Pool.Query(ctx, "SELECT ticker::text || ':' || module, v FROM modules")
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			var k string
			var v int64
			if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { got[k] = v; return nil }); err != nil {
				t.Fatal(err)
			}
			return got
		}

		// New keys only: the lookup finds none, and the rows are COPYed into
		// the table as the transaction's first command (cmin 0), where the
		// staging path would have created and filled a temporary table first.
		if err := s.Write(ctx, []tickerRow{{"NVDA", "options_flow", 1}, {"AAPL", "dark_pool", 2}}); err != nil {
			t.Fatal(err)
		}
		var cmins []int64
		rows, err := pg.Pool.Query(ctx, "SELECT cmin::text::int8 FROM modules")
		if err != nil {
			t.Fatal(err)
		}
		var c int64
		if _, err := pgx.ForEachRow(rows, []any{&c}, func() error { cmins = append(cmins, c); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(cmins) != 2 || cmins[0] != 0 || cmins[1] != 0 {
			t.Errorf("cmin of the new rows = %v, want [0 0]: not written by the direct COPY (the key lookup failed?)", cmins)
		}

		// Case variants, across batches and within one, update the row stored
		// under the first spelling.
		for _, b := range [][]tickerRow{
			{{"nvda", "options_flow", 3}},
			{{"Nvda", "options_flow", 4}, {"aapl", "dark_pool", 5}, {"NVDA", "options_flow", 6}},
		} {
			if err := s.Write(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := read(), map[string]int64{"NVDA:options_flow": 6, "AAPL:dark_pool": 5}; !maps.Equal(got, want) {
			t.Errorf("rows = %v, want %v", got, want)
		}
	})
}
