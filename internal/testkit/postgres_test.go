package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// checkIsolation creates a table in one schema of srv and checks that a
// second schema does not see it, through both pgx and database/sql, and that
// each schema is dropped when its subtest ends.
func checkIsolation(t *testing.T, srv *PostgresServer) {
	t.Helper()
	var schemaA string
	t.Run("schemas", func(t *testing.T) {
		a, b := srv.Postgres(t), srv.Postgres(t)
		schemaA = a.Schema
		if a.Schema == b.Schema || !nameRE.MatchString(a.Schema) {
			t.Fatalf("schemas %q and %q", a.Schema, b.Schema)
		}
		ctx := Context(t)
		if _, err := a.Pool.Exec(ctx, `CREATE TABLE items (id int PRIMARY KEY, v text); INSERT INTO items VALUES (1, 'one')`); err != nil {
			t.Fatal(err)
		}
		var v string
		if err := a.DB(t).QueryRowContext(ctx, `SELECT v FROM items WHERE id = 1`).Scan(&v); err != nil || v != "one" {
			t.Fatalf("database/sql in schema a: v=%q err=%v, want one", v, err)
		}
		var reg *string
		if err := b.Pool.QueryRow(ctx, `SELECT to_regclass('items')::text`).Scan(&reg); err != nil {
			t.Fatal(err)
		}
		if reg != nil {
			t.Fatalf("schema b sees table %s from schema a", *reg)
		}
		if _, err := b.DB(t).ExecContext(ctx, `SELECT 1 FROM items`); err == nil {
			t.Fatal("database/sql in schema b can read schema a's table")
		}
		conn, err := pgx.Connect(ctx, a.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var schema string
		if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil || schema != a.Schema {
			t.Fatalf("current_schema() on a.URL = %q (%v), want %q", schema, err, a.Schema)
		}
	})
	if t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1`, schemaA).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema %s still exists after its test (count=%d err=%v)", schemaA, n, err)
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	srv := NewPostgresServer(t)
	t.Logf("using %s", srv)
	checkIsolation(t, srv)
}

func TestPostgresLocalBinaries(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	var url string
	t.Run("server", func(t *testing.T) {
		srv := NewPostgresServer(t)
		if srv.Kind != "local" || !srv.Real {
			t.Fatalf("got %s, want local binaries", srv)
		}
		url = srv.URL
		checkIsolation(t, srv)
		p := srv.Postgres(t)
		var version string
		if err := p.Pool.QueryRow(Context(t), `SHOW server_version`).Scan(&version); err != nil || version == "" {
			t.Fatalf("server_version %q: %v", version, err)
		}
		t.Logf("local PostgreSQL %s", version)
	})
	if url == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, url); err == nil {
		conn.Close(ctx)
		t.Fatal("local PostgreSQL still accepts connections after its test ended")
	}
}

func TestWithSearchPath(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"postgres://u:p@h:5432/db?sslmode=disable", "postgres://u:p@h:5432/db?search_path=s1&sslmode=disable"},
		{"postgresql://h/db", "postgresql://h/db?search_path=s1"},
		{"postgres://h/db?search_path=old", "postgres://h/db?search_path=s1"},
		{"host=h user=u dbname=db ", "host=h user=u dbname=db search_path=s1"},
	} {
		got, err := withSearchPath(c.in, "s1")
		if err != nil || got != c.want {
			t.Errorf("withSearchPath(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}
