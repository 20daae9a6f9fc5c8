package testkit

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// With DATABASE_URL unset, MainWithPostgres starts one local server for
// the test binary: the tests see DATABASE_URL pointing at it, and
// NewPostgresServer hands it out as "local-shared" (every call the same
// server, each Postgres a schema of its own) instead of starting a server
// per call or skipping. After the tests the server is stopped and the
// variables are gone.
func TestMainWithPostgresStartsOneSharedServer(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv(SharedPostgresEnv, "")
	var url string
	var stderr bytes.Buffer
	code := mainWithPostgres(func() int {
		url = os.Getenv("DATABASE_URL")
		if url == "" {
			return 3 // no binaries: checked below
		}
		// The tests' view, in a subtest so that its schemas are dropped
		// while the server runs.
		t.Run("tests", func(t *testing.T) {
			a, b := NewPostgresServer(t), NewPostgresServer(t)
			if a.URL != url || b.URL != url || a.Kind != "local-shared" {
				t.Fatalf("servers %s %s (%s): want both on DATABASE_URL, local-shared", a.URL, b.URL, a.Kind)
			}
			pa, pb := a.Postgres(t), b.Postgres(t)
			ctx := Context(t)
			if _, err := pa.Pool.Exec(ctx, "CREATE TABLE t (v int)"); err != nil {
				t.Fatal(err)
			}
			if _, err := pb.Pool.Exec(ctx, "CREATE TABLE t (v int)"); err != nil {
				t.Fatalf("a second schema on the shared server: %v", err)
			}
		})
		return 7
	}, &stderr)
	if code == 3 {
		if stderr.Len() > 0 {
			t.Fatalf("the shared server failed: %s", stderr.String())
		}
		t.Skip("no PostgreSQL binaries (initdb) to start a shared server")
	}
	if code != 7 {
		t.Fatalf("exit code %d, want the run's 7", code)
	}
	if os.Getenv("DATABASE_URL") != "" || os.Getenv(SharedPostgresEnv) != "" {
		t.Fatal("DATABASE_URL or the shared marker still set after the run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, url); err == nil {
		conn.Close(ctx)
		t.Fatal("the shared server still answers after the run")
	}
}

// With DATABASE_URL set, MainWithPostgres starts nothing: the tests use it.
func TestMainWithPostgresKeepsDatabaseURL(t *testing.T) {
	const env = "postgres://u@127.0.0.1:1/db"
	t.Setenv("DATABASE_URL", env)
	t.Setenv(SharedPostgresEnv, "")
	var seen, marker string
	code := mainWithPostgres(func() int {
		seen, marker = os.Getenv("DATABASE_URL"), os.Getenv(SharedPostgresEnv)
		return 0
	}, os.Stderr)
	if code != 0 || seen != env || marker != "" {
		t.Fatalf("code %d, DATABASE_URL %q, marker %q: want 0, %q, none", code, seen, marker, env)
	}
}

// NewPrivatePostgresServer starts a server of the test's own even when
// DATABASE_URL names another one.
func TestNewPrivatePostgresServerIgnoresDatabaseURL(t *testing.T) {
	const env = "postgres://u@127.0.0.1:1/db"
	t.Setenv("DATABASE_URL", env)
	s := NewPrivatePostgresServer(t)
	if s.URL == env || s.Kind != "local" {
		t.Fatalf("server %s (%s): want a local one of its own", s.URL, s.Kind)
	}
	pg := s.Postgres(t)
	var one int
	if err := pg.Pool.QueryRow(Context(t), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("query the private server: %v", err)
	}
}
