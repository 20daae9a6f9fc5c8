package localsvc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

// startPostgres starts a server (see started).
func startPostgres(t *testing.T, o PostgresOptions) *Postgres {
	t.Helper()
	pg, err := StartPostgres(testContext(t), o)
	return started(t, pg, err)
}

// connect opens a connection to url, closed when t ends.
func connect(t *testing.T, url string) (context.Context, *pgx.Conn) {
	t.Helper()
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return ctx, conn
}

// queryString runs a one-value query on url.
func queryString(t *testing.T, url, q string) string {
	t.Helper()
	ctx, conn := connect(t, url)
	var s string
	if err := conn.QueryRow(ctx, q).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s
}

// execSQL runs statements on url.
func execSQL(t *testing.T, url, q string) {
	t.Helper()
	ctx, conn := connect(t, url)
	if _, err := conn.Exec(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// TestPostgresDirReused starts a server on a given Dir, writes a row, stops
// it, and starts it again on the same Dir and the same port (a restart, as
// clients holding the URL see it): the cluster (database, table, row) is
// reused, not initialized again, and the old URL reaches it.
func TestPostgresDirReused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(reachableDir(t), "pg") // does not exist yet
	ctx := testContext(t)
	var log syncBuffer

	pg := startPostgres(t, PostgresOptions{Dir: dir, Log: &log})
	if want := postgresURL(pg.Port, "postgres"); pg.URL != want {
		t.Fatalf("URL = %q, want %q", pg.URL, want)
	}
	if got := queryString(t, pg.URL, "SHOW data_directory"); got != filepath.Join(dir, "data") {
		t.Fatalf("data_directory = %q, want %q", got, filepath.Join(dir, "data"))
	}
	url, err := pg.CreateDatabase(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if want := postgresURL(pg.Port, "demo"); url != want {
		t.Fatalf("CreateDatabase URL = %q, want %q", url, want)
	}
	execSQL(t, url, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('first run')")
	// initdb's output and the server's go to Log; Output has the server's.
	const initdbSays = "The files belonging to this database system"
	if !strings.Contains(log.String(), initdbSays) || !strings.Contains(log.String(), "ready to accept connections") {
		t.Errorf("Log lacks initdb's or the server's output:\n%s", log.String())
	}
	if !strings.Contains(pg.Output(), "ready to accept connections") {
		t.Errorf("Output lacks the server's output:\n%s", pg.Output())
	}
	firstPort := pg.Port
	if err := pg.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertPortFree(t, firstPort)
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("the caller's Dir lost its cluster on Stop: %v", err)
	}

	port := firstPort
	log2 := &syncBuffer{}
	pg2 := startPostgres(t, PostgresOptions{Dir: dir, Port: port, Log: log2})
	if pg2.Port != port || pg2.URL != postgresURL(port, "postgres") {
		t.Fatalf("second start: Port %d URL %q, want port %d", pg2.Port, pg2.URL, port)
	}
	if strings.Contains(log2.String(), initdbSays) || !strings.Contains(log2.String(), "ready to accept connections") {
		t.Fatalf("second start ran initdb again, or its Log lacks the server output:\n%s", log2.String())
	}
	url2, err := pg2.CreateDatabase(ctx, "demo") // exists: kept as it is
	if err != nil {
		t.Fatal(err)
	}
	if url2 != url {
		t.Fatalf("URL after the restart = %q, want the first run's %q", url2, url)
	}
	if got := queryString(t, url, "SELECT v FROM kept"); got != "first run" {
		t.Fatalf("row after restart = %q, want %q", got, "first run")
	}
	if err := pg2.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertPortFree(t, port)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("Stop removed the caller's Dir: %v", err)
	}
}

// TestPostgresTempDir checks a server without Dir: CreateDatabase is
// idempotent under concurrency, and Stop frees the port and removes the
// directory, once.
func TestPostgresTempDir(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := startPostgres(t, PostgresOptions{})
	base := filepath.Dir(queryString(t, pg.URL, "SHOW data_directory"))
	if !strings.HasPrefix(filepath.Base(base), "localsvc-pg-") {
		t.Fatalf("data directory in %s, want a localsvc-pg-* temp dir", base)
	}
	if got := queryString(t, pg.URL, "SELECT current_user::text || ' ' || (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)::text"); got != "postgres true" {
		t.Fatalf("URL logs in as %q, want the superuser postgres", got)
	}
	if os.Geteuid() == 0 { // the server must run as the postgres OS user
		u, err := lookupUser("postgres")
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(base, "data"))
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != u.uid {
			t.Fatalf("data directory owned by uid %d, want postgres (%d)", st.Uid, u.uid)
		}
	}

	if _, err := pg.CreateDatabase(ctx, ""); err == nil {
		t.Fatal("CreateDatabase(\"\") succeeded")
	}
	const n = 4
	urls := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { urls[i], errs[i] = pg.CreateDatabase(ctx, "Mixed-Case db") })
	}
	wg.Wait()
	want := postgresURL(pg.Port, "Mixed-Case db")
	for i := range n {
		if errs[i] != nil || urls[i] != want {
			t.Fatalf("concurrent CreateDatabase #%d = %q, %v; want %q", i, urls[i], errs[i], want)
		}
	}
	if got := queryString(t, want, "SELECT current_database()"); got != "Mixed-Case db" {
		t.Fatalf("current_database() on the returned URL = %q", got)
	}
	if got := queryString(t, pg.URL, "SELECT count(*)::text FROM pg_database WHERE datname = 'Mixed-Case db'"); got != "1" {
		t.Fatalf("%s databases named Mixed-Case db", got)
	}

	if err := pg.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertPortFree(t, pg.Port)
	assertGone(t, base)
	if err := pg.Stop(); err != nil {
		t.Fatalf("second Stop = %v, want the first call's nil", err)
	}
	if _, err := pg.CreateDatabase(ctx, "late"); err == nil {
		t.Fatal("CreateDatabase after Stop succeeded")
	}
}
