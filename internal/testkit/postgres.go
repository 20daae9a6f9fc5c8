package testkit

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/sluicehq/sluice/internal/localsvc"
)

// PostgresImage is the container image NewPostgres runs when it uses Docker.
const PostgresImage = "postgres:16-alpine"

// PostgresServer is a PostgreSQL server that hands out isolated schemas.
// Share one between the subtests of a test to start a local server once.
type PostgresServer struct {
	// URL is the superuser (or DATABASE_URL) DSN. It may contain a
	// password: do not log it.
	URL string
	// Real is always true: there is no PostgreSQL fake.
	Real bool
	// Kind is where the server came from: "env" (DATABASE_URL), "local"
	// (initdb + postgres started for this test), "local-shared" (started
	// once for the test binary by MainWithPostgres) or "container".
	Kind string
}

// Postgres is a fresh schema on a PostgreSQL server, private to one test.
type Postgres struct {
	// URL is a DSN whose search_path is Schema (set as the search_path
	// runtime parameter, which pgx, pgx/stdlib and lib/pq all send), so
	// unqualified names resolve in Schema only. It may contain a password.
	URL string
	// Schema is the schema's name (see Name); it is dropped with CASCADE on
	// cleanup.
	Schema string
	// Pool is a pgx pool on URL, closed on cleanup.
	Pool *pgxpool.Pool
	// Real is always true.
	Real bool
	// Kind is the server's Kind.
	Kind string
}

// NewPostgres returns a fresh schema on a PostgreSQL server:
// NewPostgresServer(t).Postgres(t).
func NewPostgres(t testing.TB) *Postgres {
	t.Helper()
	return NewPostgresServer(t).Postgres(t)
}

// NewPostgresServer returns a PostgreSQL server for t. Order: DATABASE_URL
// (which MainWithPostgres points at a server shared by the test binary);
// local binaries (initdb and postgres on PATH or in
// /usr/lib/postgresql/*/bin) started by localsvc.StartPostgres in a
// temporary directory on a free port with trust auth for superuser
// "postgres" — as the "postgres" OS user when the test runs as root — and
// stopped on cleanup; a postgres container
// when a Docker engine answers; else the test is skipped (failed under
// CI=true).
func NewPostgresServer(t testing.TB) *PostgresServer {
	t.Helper()
	s := newPostgresServer(t)
	if s != nil {
		t.Logf("testkit: %s", s) // never the URL: it may hold a password
	}
	return s
}

func newPostgresServer(t testing.TB) *PostgresServer {
	t.Helper()
	if u := os.Getenv("DATABASE_URL"); u != "" {
		if u == os.Getenv(SharedPostgresEnv) {
			return &PostgresServer{URL: u, Real: true, Kind: "local-shared"}
		}
		return &PostgresServer{URL: u, Real: true, Kind: "env"}
	}
	var why reasons
	why.add("DATABASE_URL unset")
	u, err := startLocalPostgres(t)
	if err == nil {
		return &PostgresServer{URL: u, Real: true, Kind: "local"}
	}
	why.addLocal(t, "PostgreSQL", err)
	if err := dockerEngine(t); err != nil {
		why.add("%v", err)
	} else if u, err := startPostgresContainer(t); err != nil {
		why.add("postgres container: %v", err)
	} else {
		return &PostgresServer{URL: u, Real: true, Kind: "container"}
	}
	unavailable(t, "no PostgreSQL: %s", why)
	return nil
}

// IsReal implements Service.
func (s *PostgresServer) IsReal() bool { return s.Real }

// String implements Service; it never includes the URL.
func (s *PostgresServer) String() string { return "PostgreSQL (" + s.Kind + ")" }

// Postgres creates a schema named Name(t, "t") on s and returns a URL and a
// pool that use it. The pool is closed and the schema dropped on t's
// cleanup, so a subtest may call it on its parent's server.
func (s *PostgresServer) Postgres(t testing.TB) *Postgres {
	t.Helper()
	schema := Name(t, "t")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testkit: create schema %s on %s: %v", schema, s, err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		// A lock held by a connection the test forgot to close must not
		// hang the cleanup.
		if err := s.exec(ctx, "SET lock_timeout = '10s'", "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("testkit: drop schema %s: %v", schema, err)
		}
	})
	dsn, err := withSearchPath(s.URL, schema)
	if err != nil {
		t.Fatalf("testkit: %s: %v", s, err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("testkit: pool on %s: %v", s, err)
	}
	t.Cleanup(pool.Close)
	var current string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&current); err != nil {
		t.Fatalf("testkit: query %s: %v", s, err)
	}
	if current != schema {
		t.Fatalf("testkit: %s ignores the search_path parameter: current_schema() = %q, want %q", s, current, schema)
	}
	return &Postgres{URL: dsn, Schema: schema, Pool: pool, Real: s.Real, Kind: s.Kind}
}

// exec runs statements in order on one new connection to s.
func (s *PostgresServer) exec(ctx context.Context, stmts ...string) error {
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// IsReal implements Service.
func (p *Postgres) IsReal() bool { return p.Real }

// String implements Service; it never includes the URL.
func (p *Postgres) String() string { return "PostgreSQL (" + p.Kind + ") schema " + p.Schema }

// DB returns a database/sql handle (pgx/stdlib) on URL, for code such as
// goose that wants *sql.DB. It is closed on cleanup.
func (p *Postgres) DB(t testing.TB) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(p.URL)
	if err != nil {
		t.Fatalf("testkit: parse %s URL: %v", p, err)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// withSearchPath returns dsn with its search_path runtime parameter set to
// schema. dsn is a postgres:// URL or a keyword/value string.
func withSearchPath(dsn, schema string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse database URL: %w", err) // url.Error never prints the password
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return strings.TrimSpace(dsn) + " search_path=" + schema, nil
}

// startLocalPostgres starts a throwaway cluster with localsvc, stopped on
// t's cleanup, and returns its superuser URL. The error wraps
// localsvc.ErrNotFound when there are no binaries.
func startLocalPostgres(t testing.TB) (string, error) {
	t.Helper()
	pg, err := startLocal(t, "postgres", func(ctx context.Context) (*localsvc.Postgres, error) {
		return localsvc.StartPostgres(ctx, localsvc.PostgresOptions{})
	})
	if err != nil {
		return "", err
	}
	return pg.URL, nil
}

// startPostgresContainer runs PostgresImage and returns its superuser URL.
func startPostgresContainer(t testing.TB) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), containerStartTimeout)
	defer cancel()
	ctr, err := tcpostgres.Run(ctx, PostgresImage,
		testcontainers.WithLogger(newTCLogger(t)),
		tcpostgres.WithDatabase("sluice"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
	)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		return "", err
	}
	u, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return "", fmt.Errorf("connection string: %w", err)
	}
	return u, nil
}
