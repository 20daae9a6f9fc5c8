package trades

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
)

// The trades migration creates the pipeline's tables with the keys and
// checks the services rely on, and its Down removes them.
func TestTradesMigration(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	db := pg.Pool

	exec := func(sql string, args ...any) string {
		t.Helper()
		_, err := db.Exec(ctx, sql, args...)
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return pe.Code
		}
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return ""
	}
	const (
		ok         = ""
		checkFail  = "23514"
		notNull    = "23502"
		uniqueFail = "23505"
		fkFail     = "23503"
	)

	// A normalised trade is stored with its exact decimals.
	tr, err := rawTrade(`"T-1"`, `"btc-usd"`, `"buy"`, `"0.00000000000000000001"`, `"12345678901234567890.123456789"`, `-`,
		`"2025-06-01T10:00:00.123456Z"`).Normalize("u1", "coinbase", testNow)
	if err != nil {
		t.Fatal(err)
	}
	insert := `INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, fee, ts, import_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'imp')
		ON CONFLICT (user_id, broker, ext_id) DO UPDATE SET price = EXCLUDED.price`
	row := func(tr Trade) []any {
		return []any{tr.ID, tr.UserID, tr.Broker, tr.ExtID, tr.Symbol, string(tr.Side),
			exactString(tr.Qty), exactString(tr.Price), exactString(tr.Fee), tr.TS}
	}
	if code := exec(insert, row(tr)...); code != ok {
		t.Fatalf("insert: %s", code)
	}
	var qty, price, fee string
	var ts time.Time
	if err := db.QueryRow(ctx, `SELECT qty::text, price::text, fee::text, ts FROM trades WHERE id = $1`, tr.ID).Scan(&qty, &price, &fee, &ts); err != nil {
		t.Fatal(err)
	}
	if qty != "0.00000000000000000001" || price != "12345678901234567890.123456789" || fee != "0" || !ts.Equal(tr.TS) {
		t.Errorf("stored qty %s price %s fee %s ts %v", qty, price, fee, ts)
	}
	// The natural key upserts.
	again := tr
	again.Price = dec("2")
	if code := exec(insert, row(again)...); code != ok {
		t.Fatalf("upsert: %s", code)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*), min(price)::text FROM trades`).Scan(&n, &price); err != nil || n != 1 || price != "2" {
		t.Errorf("after upsert: %d rows, price %s (%v)", n, price, err)
	}
	if code := exec(`INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, ts)
		VALUES (gen_random_uuid(), 'u1', 'coinbase', 'T-1', 'X', 'BUY', 1, 1, now())`); code != uniqueFail {
		t.Errorf("second row of (user, broker, ext_id): %q, want %s", code, uniqueFail)
	}
	if code := exec(`INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, ts)
		VALUES (gen_random_uuid(), 'u1', 'coinbase', 'T-2', 'X', 'BUY', 1, 1, now())`); code != ok {
		t.Errorf("fee default: %s", code)
	}

	cases := []struct {
		name, sql string
		want      string
	}{
		{"side HOLD", `INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, ts) VALUES (gen_random_uuid(), 'u', 'b', 'e1', 'X', 'HOLD', 1, 1, now())`, checkFail},
		{"side lower case", `INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, ts) VALUES (gen_random_uuid(), 'u', 'b', 'e2', 'X', 'buy', 1, 1, now())`, checkFail},
		{"qty 0", `INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, ts) VALUES (gen_random_uuid(), 'u', 'b', 'e3', 'X', 'BUY', 0, 1, now())`, checkFail},
		{"price < 0", `INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, ts) VALUES (gen_random_uuid(), 'u', 'b', 'e4', 'X', 'BUY', 1, -1, now())`, checkFail},
		{"fee < 0", `INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, fee, ts) VALUES (gen_random_uuid(), 'u', 'b', 'e5', 'X', 'BUY', 1, 1, -0.01, now())`, checkFail},
		{"no ts", `INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price) VALUES (gen_random_uuid(), 'u', 'b', 'e6', 'X', 'BUY', 1, 1)`, notNull},
		{"connection", `INSERT INTO broker_connections (user_id, broker, access_enc) VALUES ('u1', 'coinbase', '\x01')`, ok},
		{"connection twice", `INSERT INTO broker_connections (user_id, broker, access_enc) VALUES ('u1', 'coinbase', '\x02')`, uniqueFail},
		{"connection to synthetic", `INSERT INTO broker_connections (user_id, broker, access_enc) VALUES ('u1', 'synthetic', '\x01')`, checkFail},
		{"connection without token", `INSERT INTO broker_connections (user_id, broker) VALUES ('u1', 'binance')`, notNull},
		{"tag", `INSERT INTO bias_tags (trade_id, label, confidence, features, rules_version, scored_at) VALUES ('` + tr.ID + `', 'overtrading', 1, '{}', 1, now())`, ok},
		{"tag twice", `INSERT INTO bias_tags (trade_id, label, confidence, features, rules_version, scored_at) VALUES ('` + tr.ID + `', 'overtrading', 0.5, '{}', 1, now())`, uniqueFail},
		{"tag of no trade", `INSERT INTO bias_tags (trade_id, label, confidence, features, rules_version, scored_at) VALUES (gen_random_uuid(), 'overtrading', 0.5, '{}', 1, now())`, fkFail},
		{"confidence 1.5", `INSERT INTO bias_tags (trade_id, label, confidence, features, rules_version, scored_at) VALUES ('` + tr.ID + `', 'x', 1.5, '{}', 1, now())`, checkFail},
		{"tag without features", `INSERT INTO bias_tags (trade_id, label, confidence, rules_version, scored_at) VALUES ('` + tr.ID + `', 'y', 0.5, 1, now())`, notNull},
		{"digest", `INSERT INTO digests (user_id, period_start, period_end, revision, partial, agg, object_key) VALUES ('u1', '2025-01-06', '2025-01-13', 1, false, '{}', 'k')`, ok},
		{"digest of the same period", `INSERT INTO digests (user_id, period_start, period_end, revision, partial, agg, object_key) VALUES ('u1', '2025-01-06', '2025-01-13', 2, false, '{}', 'k')`, uniqueFail},
		{"bar", `INSERT INTO market_bars (symbol, granularity, ts, close) VALUES ('BTC', '1h', '2025-01-06T00:00:00Z', 1)`, ok},
		{"bar twice", `INSERT INTO market_bars (symbol, granularity, ts, close) VALUES ('BTC', '1h', '2025-01-06T00:00:00Z', 2)`, uniqueFail},
		{"bar of 5m", `INSERT INTO market_bars (symbol, granularity, ts, close) VALUES ('BTC', '5m', '2025-01-06T00:00:00Z', 1)`, checkFail},
		{"bar without close", `INSERT INTO market_bars (symbol, granularity, ts) VALUES ('BTC', '1d', '2025-01-06T00:00:00Z')`, notNull},
	}
	for _, c := range cases {
		if got := exec(c.sql); got != c.want {
			t.Errorf("%s: SQLSTATE %q, want %q", c.name, got, c.want)
		}
	}

	var def string
	if err := db.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'idx_trades_user_ts'`).Scan(&def); err != nil {
		t.Fatalf("index idx_trades_user_ts: %v", err)
	}
	if def != "CREATE INDEX idx_trades_user_ts ON "+pg.Schema+".trades USING btree (user_id, ts)" {
		t.Errorf("index %s", def)
	}

	sqlDB, err := schemas.Open(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	rolled, err := schemas.ResetDB(ctx, sqlDB)
	if err != nil || !slices.Contains(rolled, "00006_trades.sql") {
		t.Fatalf("reset rolled back %v, %v", rolled, err)
	}
	var left []string
	rows, err := db.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		left = append(left, s)
	}
	if rows.Err() != nil || !slices.Equal(left, []string{schemas.VersionTable}) {
		t.Errorf("after down: tables %v (%v)", left, rows.Err())
	}
}
