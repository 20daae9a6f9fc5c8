package schemas_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
)

// freshSchema gives the test a private schema (testkit: DATABASE_URL, a
// local server, or a container) and returns its name, a URL whose
// connections use it as search_path (set through the search_path parameter,
// or through options when viaOptions), and an admin connection.
func freshSchema(t *testing.T, viaOptions bool) (string, string, *sql.DB) {
	t.Helper()
	pg := testkit.NewPostgres(t)
	u, err := url.Parse(pg.URL)
	if err != nil {
		t.Fatalf("parse the test database URL: %v", err)
	}
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	// The admin connection has the default search_path, so that catalog
	// queries show schema-qualified names.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := schemas.Open(ctx, u.String())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { admin.Close() })
	if viaOptions {
		q.Set("options", "-csearch_path="+pg.Schema)
	} else {
		q.Set("search_path", pg.Schema)
	}
	u.RawQuery = q.Encode()
	return pg.Schema, u.String(), admin
}

func tableColumns(t *testing.T, db *sql.DB, schema, table string) map[string]string {
	t.Helper()
	rows, err := db.Query(`SELECT column_name, data_type, is_nullable, coalesce(column_default, '')
		FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2`, schema, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols := map[string]string{}
	for rows.Next() {
		var name, typ, nullable, def string
		if err := rows.Scan(&name, &typ, &nullable, &def); err != nil {
			t.Fatal(err)
		}
		s := typ
		if nullable == "NO" {
			s += " not null"
		}
		if def != "" {
			s += " default " + def
		}
		cols[name] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return cols
}

// constraintColumns returns the columns of table's constraints of type kind
// (PRIMARY KEY or UNIQUE), each as a comma-joined list in key order.
func constraintColumns(t *testing.T, db *sql.DB, schema, table, kind string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT string_agg(k.column_name, ',' ORDER BY k.ordinal_position)
		FROM information_schema.table_constraints c
		JOIN information_schema.key_column_usage k
		  ON k.constraint_schema = c.constraint_schema AND k.constraint_name = c.constraint_name
		WHERE c.table_schema = $1 AND c.table_name = $2 AND c.constraint_type = $3
		GROUP BY c.constraint_name ORDER BY 1`, schema, table, kind)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var cols string
		if err := rows.Scan(&cols); err != nil {
			t.Fatal(err)
		}
		out = append(out, cols)
	}
	return out
}

func indexDefs(t *testing.T, db *sql.DB, schema, table string) map[string]string {
	t.Helper()
	rows, err := db.Query(`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = $2`, schema, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var n, d string
		if err := rows.Scan(&n, &d); err != nil {
			t.Fatal(err)
		}
		out[n] = strings.ReplaceAll(d, schema+".", "")
	}
	return out
}

func tables(t *testing.T, db *sql.DB, schema string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

func TestMigrateCreatesTablesInSearchPathSchema(t *testing.T) {
	t.Parallel()
	for _, viaOptions := range []bool{false, true} {
		t.Run(fmt.Sprintf("options=%t", viaOptions), func(t *testing.T) {
			t.Parallel()
			schema, dbURL, admin := freshSchema(t, viaOptions)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// public of a shared database may hold tables of a manual
			// `sluice migrate` without a search_path: compare with before.
			inPublic := tables(t, admin, "public")

			applied, err := schemas.Migrate(ctx, dbURL)
			if err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			if want := schemas.MigrationNames(); !slices.Equal(applied, want) || len(want) != 8 {
				t.Fatalf("applied %v, want %v", applied, want)
			}
			want := []string{"analysis_catalog", "analysis_jobs", "analysis_jobs_status", "bias_tags", "broker_connections",
				"control_flags", "digests", "dlq_archive", "market_bars", "module_snapshots", "post_analytics", "sa_silver",
				schemas.VersionTable, "ta_silver", "ticker_data_modules", "ticker_modules_status", "trades", "unit_analyses"}
			if got := tables(t, admin, schema); !slices.Equal(got, want) {
				t.Fatalf("tables in %s = %v, want %v", schema, got, want)
			}
			// Nothing leaked into public.
			for _, tbl := range tables(t, admin, "public") {
				if slices.Contains(want, tbl) && !slices.Contains(inPublic, tbl) {
					t.Errorf("table %s created in public", tbl)
				}
			}

			again, err := schemas.Migrate(ctx, dbURL)
			if err != nil || len(again) != 0 {
				t.Fatalf("second Migrate = %v, %v; want nothing applied", again, err)
			}
		})
	}
}

func TestMigrationDDL(t *testing.T) {
	t.Parallel()
	schema, dbURL, admin := freshSchema(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := schemas.Migrate(ctx, dbURL); err != nil {
		t.Fatal(err)
	}

	columns := map[string]map[string]string{
		"ta_silver": {
			"symbol": "text not null", "trade_date": "date not null",
			"open": "double precision not null", "high": "double precision not null",
			"low": "double precision not null", "close": "double precision not null",
			"volume": "bigint not null", "vwap": "double precision", "adj_close": "double precision",
			"currency": "text not null default 'VND'::text", "price_multiplier": "double precision not null default 1.0",
			"source": "text", "first_seen_time": "timestamp with time zone",
			"ingest_time": "timestamp with time zone not null default now()", "content_hash": "text",
		},
		"sa_silver": {
			"url_canonical": "text not null", "source_domain": "text not null",
			"publisher_time": "timestamp with time zone not null", "first_seen_time": "timestamp with time zone not null",
			"language": "text", "title": "text", "text_normalized": "text", "content_hash": "text not null",
			"symbols": "ARRAY", "author": "text", "topic_tags": "ARRAY",
			"hype_raw": "double precision", "hype_crowd": "double precision", "hype_elitist": "double precision",
			"account_weights_applied": "boolean", "ingest_time": "timestamp with time zone not null default now()",
		},
		"control_flags": {
			"name": "text not null", "value": "boolean not null", "updated_at": "timestamp with time zone not null default now()",
		},
		"dlq_archive": {
			"id":        fmt.Sprintf("bigint not null default nextval('%s.dlq_archive_id_seq'::regclass)", schema),
			"dlq_topic": "text not null", "dlq_partition": "integer not null", "dlq_offset": "bigint not null",
			"source_topic": "text", "source_partition": "integer", "source_offset": "bigint",
			"reason": "text not null", "rule_id": "text not null default ''::text", "error_msg": "text not null default ''::text",
			"stage": "text not null default ''::text", "attempts": "integer not null default 0", "record_key": "text",
			"payload": "bytea not null", "payload_json": "jsonb", "failed_at": "timestamp with time zone",
			"created_at":    "timestamp with time zone not null default now()",
			"dlq_topic_id":  "uuid not null default '00000000-0000-0000-0000-000000000000'::uuid",
			"redrive_count": "integer not null default 0",
		},
		"post_analytics": {
			"project_id": "text not null", "item_id": "text not null", "platform": "text",
			"language": "text not null default 'unknown'::text", "sentiment_label": "text", "sentiment_score": "double precision",
			"keywords": "jsonb not null default '[]'::jsonb", "mentions": "jsonb not null default '[]'::jsonb",
			"engagement_score": "double precision", "raw_object_key": "text", "analyzed_at": "timestamp with time zone",
			"error_type": "text", "error_msg": "text",
			"created_at": "timestamp with time zone not null default now()", "updated_at": "timestamp with time zone not null default now()",
		},
		"analysis_catalog": {
			"module_id": "text not null", "freshness_threshold_hours": "numeric",
			"data_ttl_hours": "numeric not null default 24.0", "analysis_ttl_hours": "numeric not null default 24.0",
			"max_stale_hours": "numeric default NULL::numeric", "enabled": "boolean not null default true",
		},
		"ticker_data_modules": {
			"ticker": "citext not null", "module_id": "text not null",
			"status": "text not null default 'missing'::text", "data_date": "date",
			"fetched_at": "timestamp with time zone", "expires_at": "timestamp with time zone", "input_hash": "text",
			"refresh_lock_until": "timestamp with time zone", "refresh_lock_owner": "text", "last_error": "text",
			"error_count": "integer not null default 0", "state_epoch": "bigint not null", "state_version": "bigint not null",
			"updated_at": "timestamp with time zone not null",
		},
		"module_snapshots": {
			"ticker": "citext not null", "module_id": "text not null", "input_hash": "text not null",
			"data_date": "date", "fetched_at": "timestamp with time zone not null", "payload": "jsonb not null",
		},
		"unit_analyses": {
			"id":     fmt.Sprintf("bigint not null default nextval('%s.unit_analyses_id_seq'::regclass)", schema),
			"ticker": "citext not null", "module_id": "text not null", "data_date": "date",
			"analysis_version": "integer default 1", "input_hash": "text", "result": "jsonb not null",
			"analyzed_at": "timestamp with time zone not null", "expires_at": "timestamp with time zone not null",
		},
		"analysis_jobs": {
			"job_id": "uuid not null default gen_random_uuid()", "idempotency_key": "text not null",
			"ticker": "citext not null", "job_type": "text not null", "modules": "ARRAY not null",
			"input_data": "jsonb not null default '{}'::jsonb", "created_at": "timestamp with time zone not null default now()",
		},
	}
	for table, want := range columns {
		got := tableColumns(t, admin, schema, table)
		if len(got) != len(want) {
			t.Errorf("%s has %d columns, want %d: %v", table, len(got), len(want), got)
		}
		for col, w := range want {
			if got[col] != w {
				t.Errorf("%s.%s = %q, want %q", table, col, got[col], w)
			}
		}
	}
	keys := []struct {
		table, kind string
		want        []string
	}{
		{"ta_silver", "PRIMARY KEY", []string{"symbol,trade_date"}},
		{"sa_silver", "PRIMARY KEY", []string{"url_canonical"}},
		// The seed's UNIQUE on url_canonical duplicates its primary key;
		// PostgreSQL folds the two into one index.
		{"sa_silver", "UNIQUE", nil},
		{"control_flags", "PRIMARY KEY", []string{"name"}},
		{"dlq_archive", "PRIMARY KEY", []string{"id"}},
		{"dlq_archive", "UNIQUE", []string{"dlq_topic,dlq_partition,dlq_offset,dlq_topic_id"}},
		{"post_analytics", "PRIMARY KEY", []string{"project_id,item_id"}},
		{"analysis_catalog", "PRIMARY KEY", []string{"module_id"}},
		{"ticker_data_modules", "PRIMARY KEY", []string{"ticker,module_id"}},
		{"module_snapshots", "PRIMARY KEY", []string{"ticker,module_id,input_hash"}},
		{"unit_analyses", "PRIMARY KEY", []string{"id"}},
		{"unit_analyses", "UNIQUE", []string{"ticker,module_id,data_date,analysis_version"}},
		{"analysis_jobs", "PRIMARY KEY", []string{"job_id"}},
		{"analysis_jobs", "UNIQUE", []string{"idempotency_key"}},
	}
	for _, k := range keys {
		if got := constraintColumns(t, admin, schema, k.table, k.kind); !slices.Equal(got, k.want) {
			t.Errorf("%s %s = %v, want %v", k.table, k.kind, got, k.want)
		}
	}

	indexes := map[string]map[string]string{
		"sa_silver": {
			"idx_sa_silver_pub":           "CREATE INDEX idx_sa_silver_pub ON sa_silver USING btree (publisher_time)",
			"idx_sa_silver_symbols":       "CREATE INDEX idx_sa_silver_symbols ON sa_silver USING gin (symbols)",
			"idx_sa_silver_hash_fallback": "CREATE INDEX idx_sa_silver_hash_fallback ON sa_silver USING btree (source_domain, content_hash)",
		},
		"dlq_archive": {
			"idx_dlq_archive_reason_rule": "CREATE INDEX idx_dlq_archive_reason_rule ON dlq_archive USING btree (reason, rule_id)",
			"idx_dlq_archive_created_at":  "CREATE INDEX idx_dlq_archive_created_at ON dlq_archive USING btree (created_at)",
			"dlq_archive_source_record_key": "CREATE UNIQUE INDEX dlq_archive_source_record_key ON dlq_archive USING btree " +
				"(dlq_topic, dlq_topic_id, source_topic, source_partition, source_offset, redrive_count)",
		},
		"unit_analyses": {
			"unique_unit_analysis_hash": "CREATE UNIQUE INDEX unique_unit_analysis_hash ON unit_analyses USING btree (ticker, module_id, input_hash) WHERE (input_hash IS NOT NULL)",
		},
	}
	for table, want := range indexes {
		got := indexDefs(t, admin, schema, table)
		for n, def := range want {
			if got[n] != def {
				t.Errorf("index %s = %q, want %q", n, got[n], def)
			}
		}
	}

	// Defaults work through the search_path connection.
	db, err := schemas.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `INSERT INTO ta_silver (symbol, trade_date, open, high, low, close, volume) VALUES ('FPT', '2025-11-20', 1, 2, 1, 2, 10)`); err != nil {
		t.Fatal(err)
	}
	var currency string
	var mult float64
	if err := db.QueryRowContext(ctx, `SELECT currency, price_multiplier FROM ta_silver WHERE symbol = 'FPT'`).Scan(&currency, &mult); err != nil {
		t.Fatal(err)
	}
	if currency != "VND" || mult != 1.0 {
		t.Errorf("defaults: currency %q multiplier %v", currency, mult)
	}
}

func TestMigrateDownAndStatus(t *testing.T) {
	t.Parallel()
	schema, dbURL, admin := freshSchema(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := schemas.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	st, err := schemas.StatusDB(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != len(schemas.MigrationNames()) {
		t.Fatalf("status = %+v", st)
	}
	for _, s := range st {
		if s.Applied {
			t.Errorf("fresh schema: %s applied", s.Name)
		}
	}

	if _, err := schemas.MigrateDB(ctx, db); err != nil {
		t.Fatal(err)
	}
	st, err = schemas.StatusDB(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if !s.Applied || s.AppliedAt.IsZero() || s.Name != schemas.MigrationNames()[i] || s.Version != int64(i+1) {
			t.Errorf("after up: %+v", s)
		}
	}

	rolled, err := schemas.ResetDB(ctx, db)
	if err != nil {
		t.Fatalf("ResetDB: %v", err)
	}
	want := slices.Clone(schemas.MigrationNames())
	slices.Reverse(want)
	if !slices.Equal(rolled, want) {
		t.Errorf("rolled back %v, want %v", rolled, want)
	}
	if got := tables(t, admin, schema); !slices.Equal(got, []string{schemas.VersionTable}) {
		t.Errorf("tables after down = %v, want only the version table", got)
	}

	// Up after Down applies everything again.
	applied, err := schemas.MigrateDB(ctx, db)
	if err != nil || !slices.Equal(applied, schemas.MigrationNames()) {
		t.Fatalf("re-apply = %v, %v", applied, err)
	}
}

func TestMigrateRefusesMissingSchema(t *testing.T) {
	t.Parallel()
	_, dbURL, _ := freshSchema(t, false)
	u, _ := url.Parse(dbURL)
	q := u.Query()
	q.Set("search_path", "sluice_no_such_schema")
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := schemas.Migrate(ctx, u.String()); err == nil || !strings.Contains(err.Error(), "no schema of the search_path exists") {
		t.Fatalf("err = %v", err)
	}
}

func TestMigrateUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := schemas.Migrate(ctx, "postgres://sluice:sluice@127.0.0.1:1/sluice?sslmode=disable")
	if err == nil || !strings.Contains(err.Error(), "connect to database") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}
