package modules

import (
	"errors"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
)

// Schemas of one database migrated at once all get the citext extension
// (installed once per database, by whichever migration comes first) and
// see its type and case-insensitive comparison. On a fresh server of the
// test's own, where citext is not installed yet, the migrations race for
// its installation (a shared server has it from earlier migrations).
func TestMigrateSchemasConcurrently(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPrivatePostgresServer(t)
	const n = 4
	pgs := make([]*testkit.Postgres, n)
	for i := range pgs {
		pgs[i] = srv.Postgres(t)
	}
	ctx := testkit.Context(t)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, pg := range pgs {
		wg.Go(func() { _, errs[i] = schemas.Migrate(ctx, pg.URL) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, pg := range pgs {
		if _, err := pg.Pool.Exec(ctx, `INSERT INTO ticker_data_modules (ticker, module_id, state_epoch, state_version, updated_at)
			VALUES ('NVDA', 'dark_pool', 1, 1, now())`); err != nil {
			t.Fatalf("%s: %v", pg.Schema, err)
		}
		var n int
		if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM ticker_data_modules WHERE ticker = 'nvda'`).Scan(&n); err != nil || n != 1 {
			t.Errorf("%s: 'nvda' finds %d rows (%v)", pg.Schema, n, err)
		}
	}
}
