package modules

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
)

// migrated returns a pool on a fresh schema with every migration applied.
func migrated(t *testing.T) (context.Context, *pgxpool.Pool) {
	t.Helper()
	pg := testkit.NewPostgres(t)
	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return ctx, pg.Pool
}

type viewRow struct {
	status, freshness   string
	canServeStale, busy bool
}

// Freshness is derived at NOW(), the transaction's start: the rows are
// inserted and read in one transaction, so that the ages are exact.
func TestTickerModulesStatusView(t *testing.T) {
	t.Parallel()
	ctx, pool := migrated(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)

	// ready rows fetched age ago (a Go duration in microseconds) expiring
	// with the module's data TTL.
	insert := func(ticker, module, status string, age time.Duration, lockFor *time.Duration) {
		t.Helper()
		_, err := tx.Exec(ctx, `INSERT INTO ticker_data_modules
			(ticker, module_id, status, fetched_at, expires_at, refresh_lock_until, refresh_lock_owner, state_epoch, state_version, updated_at)
			SELECT $1, $2, $3, now() - make_interval(secs => $4::float8 / 1e6),
				now() - make_interval(secs => $4::float8 / 1e6) + (ac.data_ttl_hours || ' hours')::interval,
				now() + make_interval(secs => $5::float8 / 1e6), CASE WHEN $5::int8 IS NOT NULL THEN 'member-1' END, 1, 1, now()
			FROM analysis_catalog ac WHERE ac.module_id = $2`,
			ticker, module, status, age.Microseconds(), lockMicros(lockFor))
		if err != nil {
			t.Fatalf("insert %s %s: %v", ticker, module, err)
		}
	}
	min := time.Minute
	insert("OF14", ModuleOptionsFlow, "ready", 14*min, nil)
	insert("OF15", ModuleOptionsFlow, "ready", 15*min, nil)
	insert("OF15U", ModuleOptionsFlow, "ready", 15*min+time.Microsecond, nil)
	insert("OF16", ModuleOptionsFlow, "ready", 16*min, nil)
	insert("OF60", ModuleOptionsFlow, "ready", 60*min, nil)
	insert("OF61", ModuleOptionsFlow, "ready", 61*min, nil)
	insert("OF4H", ModuleOptionsFlow, "ready", 4*time.Hour, nil)
	insert("OF4HU", ModuleOptionsFlow, "ready", 4*time.Hour+time.Microsecond, nil)
	insert("SI59", ModuleShortInterest, "ready", 59*min, nil)
	insert("SI61", ModuleShortInterest, "ready", 61*min, nil)
	insert("SI72H", ModuleShortInterest, "ready", 72*time.Hour, nil)
	insert("SI72HU", ModuleShortInterest, "ready", 72*time.Hour+time.Minute, nil)
	insert("DP1", ModuleDarkPool, "ready", min, nil)
	insert("ERR", ModuleOptionsFlow, "error", min, nil)
	insert("REF", ModuleOptionsFlow, "refreshing", min, dur(time.Minute))
	insert("REFX", ModuleOptionsFlow, "refreshing", min, dur(-time.Second)) // lease ran out
	if _, err := tx.Exec(ctx, `INSERT INTO ticker_data_modules (ticker, module_id, state_epoch, state_version, updated_at)
		VALUES ('MISS', 'price_action', 1, 1, now())`); err != nil {
		t.Fatal(err)
	}

	rows, err := tx.Query(ctx, `SELECT ticker::text, status, freshness_status, can_serve_stale, refresh_in_progress FROM ticker_modules_status`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]viewRow{}
	var ticker string
	var r viewRow
	if _, err := pgx.ForEachRow(rows, []any{&ticker, &r.status, &r.freshness, &r.canServeStale, &r.busy}, func() error {
		got[ticker] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]viewRow{
		"OF14":   {"ready", "fresh", true, false},
		"OF15":   {"ready", "fresh", true, false}, // the threshold itself is not stale
		"OF15U":  {"ready", "stale", true, false},
		"OF16":   {"ready", "stale", true, false},
		"OF60":   {"ready", "stale", true, false}, // expires_at itself is not expired
		"OF61":   {"ready", "expired", true, false},
		"OF4H":   {"ready", "expired", true, false}, // max_stale 4 h
		"OF4HU":  {"ready", "expired", false, false},
		"SI59":   {"ready", "fresh", true, false},
		"SI61":   {"ready", "stale", true, false},
		"SI72H":  {"ready", "expired", true, false}, // data TTL 24 h, max_stale 72 h
		"SI72HU": {"ready", "expired", false, false},
		"DP1":    {"ready", "fresh", false, false}, // no max_stale
		"ERR":    {"error", "missing", true, false},
		"REF":    {"refreshing", "unknown", true, true},
		"REFX":   {"refreshing", "unknown", true, false},
		"MISS":   {"missing", "missing", false, false},
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %+v, want %+v", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d rows, want %d", len(got), len(want))
	}

	// The Go gate agrees with the view on the same rows.
	cat, err := LoadCatalog(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	states, err := tx.Query(ctx, `SELECT ticker::text, module_id, status, fetched_at, expires_at, now() FROM ticker_data_modules`)
	if err != nil {
		t.Fatal(err)
	}
	var s State
	var now time.Time
	if _, err := pgx.ForEachRow(states, []any{&s.Ticker, &s.Module, &s.Status, &s.FetchedAt, &s.ExpiresAt, &now}, func() error {
		if f := FreshnessOf(s, cat[s.Module], now); string(f) != want[s.Ticker].freshness {
			t.Errorf("%s: FreshnessOf = %s, the view says %s", s.Ticker, f, want[s.Ticker].freshness)
		}
		if c := CanServeStale(s, cat[s.Module], now); c != want[s.Ticker].canServeStale {
			t.Errorf("%s: CanServeStale = %v, the view says %v", s.Ticker, c, want[s.Ticker].canServeStale)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func lockMicros(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	us := d.Microseconds()
	return &us
}

// sqlState returns the SQLSTATE of err ("" when none).
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Tickers are case-insensitive keys; analyses deduplicate by input_hash
// even when data_date is NULL.
func TestModulesTablesKeys(t *testing.T) {
	t.Parallel()
	ctx, pool := migrated(t)
	exec := func(sql string, args ...any) string {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		if err != nil && sqlState(err) == "" {
			t.Fatalf("%s: %v", sql, err)
		}
		return sqlState(err)
	}
	const tdm = `INSERT INTO ticker_data_modules (ticker, module_id, state_epoch, state_version, updated_at) VALUES ($1, $2, 1, 1, now())`
	if c := exec(tdm, "NVDA", ModuleOptionsFlow); c != "" {
		t.Fatalf("insert: %s", c)
	}
	if c := exec(tdm, "nvda", ModuleOptionsFlow); c != "23505" {
		t.Errorf("nvda beside NVDA: %q, want a unique violation", c)
	}
	if c := exec(tdm, "NVDA", "insider_trades"); c != "23503" {
		t.Errorf("module not in the catalog: %q, want a foreign key violation", c)
	}
	if c := exec(`UPDATE ticker_data_modules SET status = 'stale'`); c != "23514" {
		t.Errorf("status stale: %q, want a check violation", c)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ticker_modules_status WHERE ticker = 'Nvda'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("view by 'Nvda': %d rows (%v)", n, err)
	}

	const ua = `INSERT INTO unit_analyses (ticker, module_id, data_date, analysis_version, input_hash, result, analyzed_at, expires_at)
		VALUES ($1, 'price_action', NULL, $2, $3, '{}', now(), now() + interval '30 minutes')`
	if c := exec(ua, "NVDA", 1, "h1"); c != "" {
		t.Fatal(c)
	}
	if c := exec(ua, "nvda", 2, "h1"); c != "23505" {
		t.Errorf("same input_hash, intraday: %q, want a unique violation", c)
	}
	if c := exec(ua, "NVDA", 1, "h2"); c != "" {
		t.Errorf("other input_hash, same version with NULL data_date: %q (NULLs never conflict)", c)
	}
	if c := exec(ua, "NVDA", 3, nil); c != "" {
		t.Errorf("no input_hash: %q", c)
	}
	if c := exec(ua, "NVDA", 4, nil); c != "" {
		t.Errorf("a second row without input_hash: %q", c)
	}
	if c := exec(`INSERT INTO unit_analyses (ticker, module_id, data_date, analysis_version, input_hash, result, analyzed_at, expires_at)
		VALUES ('NVDA', 'short_interest', '2025-01-01', 1, 'a', '{}', now(), now()),
		       ('nvda', 'short_interest', '2025-01-01', 1, 'b', '{}', now(), now())`); c != "23505" {
		t.Errorf("same (ticker, module, data_date, version): %q, want a unique violation", c)
	}
	// The analysis upsert of the sink conflicts on the partial index.
	if c := exec(`INSERT INTO unit_analyses (ticker, module_id, analysis_version, input_hash, result, analyzed_at, expires_at)
		VALUES ('NVDA', 'price_action', 1, 'h1', '{"again":true}', now(), now())
		ON CONFLICT (ticker, module_id, input_hash) WHERE input_hash IS NOT NULL DO UPDATE SET result = EXCLUDED.result`); c != "" {
		t.Errorf("upsert on the input_hash index: %q", c)
	}
}

func TestLoadCatalog(t *testing.T) {
	t.Parallel()
	ctx, pool := migrated(t)
	if _, err := pool.Exec(ctx, `UPDATE analysis_catalog SET enabled = false WHERE module_id = 'price_action'`); err != nil {
		t.Fatal(err)
	}
	cat, err := LoadCatalog(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	want := testCatalog()
	delete(want, "retired")
	pa := want[ModulePriceAction]
	pa.Enabled = false
	want[ModulePriceAction] = pa
	if len(cat) != len(want) {
		t.Fatalf("catalog = %+v", cat)
	}
	for id, w := range want {
		g := cat[id]
		if g.ID != w.ID || g.DataTTL != w.DataTTL || g.AnalysisTTL != w.AnalysisTTL || g.Enabled != w.Enabled ||
			!sameDur(g.FreshnessThreshold, w.FreshnessThreshold) || !sameDur(g.MaxStale, w.MaxStale) {
			t.Errorf("%s = %+v, want %+v", id, g, w)
		}
	}
	if _, err := CheckKnownModule(ModulePriceAction, cat); err == nil {
		t.Error("a disabled module passes modules.unknown_module")
	}
}

func sameDur(a, b *time.Duration) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
