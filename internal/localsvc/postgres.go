package localsvc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// postgresBinGlob is searched for initdb after PATH.
const postgresBinGlob = "/usr/lib/postgresql/*/bin"

// createDBLock is the advisory lock key CreateDatabase holds while it checks
// for and creates a database ("localsvc" in ASCII).
const createDBLock = 0x6c6f63616c737663

// PostgresOptions configures StartPostgres. The zero value is valid.
type PostgresOptions struct {
	// Dir is the base directory: the cluster lives in Dir/data and the Unix
	// socket in Dir. Empty: a fresh temporary directory, removed by Stop.
	// Set: the caller's, created if missing and kept by Stop; a cluster
	// already in Dir/data is reused. Stop followed by StartPostgres with the
	// same Dir and Port restarts the server: its data and URL stay the same
	// (a fault-injection test can take the server away from its clients
	// this way). When running as root the server runs
	// as the "postgres" OS user, so Dir is chowned to it and its parents
	// must be searchable by others (a directory under /tmp is); see the
	// package doc.
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Log receives initdb's and the server's output (nil: only kept for
	// Output and errors).
	Log io.Writer
}

// Postgres is a running local PostgreSQL server. Its methods are safe for
// concurrent use.
type Postgres struct {
	// URL is the superuser URL, with trust authentication and no password:
	// postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
	URL string
	// Port is the TCP port on 127.0.0.1.
	Port int

	srv *server
}

// StartPostgres starts a PostgreSQL server and returns when it accepts
// connections. It finds initdb on PATH or in /usr/lib/postgresql/*/bin
// (and postgres next to it), runs initdb (superuser "postgres", trust
// authentication, UTF8, locale C) unless Dir/data already holds a cluster,
// and starts postgres listening on 127.0.0.1 only. When the process runs as
// root both run as the "postgres" OS user. The server is tuned for
// throwaway data: fsync, synchronous_commit and full_page_writes are off, so
// a machine crash (not a server stop) can lose or corrupt the cluster;
// max_connections is 200. ctx bounds initdb and the wait until the server
// answers, not the server. The error wraps ErrNotFound when the binaries
// are missing; on any error nothing is left running and a temporary Dir is
// removed.
func StartPostgres(ctx context.Context, o PostgresOptions) (*Postgres, error) {
	initdb, err := findBinary("initdb", postgresBinGlob)
	if err != nil {
		return nil, err
	}
	// /usr/local/bin/initdb may be a symlink into /usr/lib/postgresql/N/bin,
	// where its postgres lives.
	if r, err := filepath.EvalSymlinks(initdb); err == nil {
		initdb = r
	}
	postgres := filepath.Join(filepath.Dir(initdb), "postgres")
	if _, err := os.Stat(postgres); err != nil {
		return nil, fmt.Errorf("postgres next to %s: %w", initdb, ErrNotFound)
	}
	var runAs *osUser
	if os.Geteuid() == 0 { // initdb and postgres refuse to run as root
		if runAs, err = lookupUser("postgres"); err != nil {
			return nil, fmt.Errorf("running as root, and %w", err)
		}
	}
	env := []string{"LC_ALL=C", "TZ=UTC"}
	srv, port, err := launch{
		name:    "postgres",
		pattern: "localsvc-pg-",
		user:    runAs,
		prepare: func(ctx context.Context, dir string) error {
			data := filepath.Join(dir, "data")
			if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err == nil {
				return nil // an initialized cluster: reuse it
			}
			return procSpec{
				name: "initdb",
				path: initdb,
				args: []string{"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"},
				env:  env,
				dir:  dir,
				user: runAs,
			}.run(ctx, o.Log)
		},
		proc: func(dir string, port int) procSpec {
			return procSpec{
				path: postgres,
				args: []string{"-D", filepath.Join(dir, "data"), "-p", strconv.Itoa(port),
					"-c", "listen_addresses=127.0.0.1",
					"-c", "unix_socket_directories=" + dir,
					"-c", "fsync=off",
					"-c", "synchronous_commit=off",
					"-c", "full_page_writes=off",
					"-c", "max_connections=200",
				},
				env:  env,
				stop: syscall.SIGINT, // fast shutdown
			}
		},
		ready: func(ctx context.Context, port int) error {
			conn, err := pgx.Connect(ctx, postgresURL(port, "postgres"))
			if err != nil {
				return err
			}
			return conn.Close(ctx)
		},
	}.start(ctx, common{dir: o.Dir, port: o.Port, log: o.Log})
	if err != nil {
		return nil, err
	}
	return &Postgres{URL: postgresURL(port, "postgres"), Port: port, srv: srv}, nil
}

// postgresURL is the superuser URL of database db on the local port.
func postgresURL(port int, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     localAddr(port),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// CreateDatabase creates the database name unless it exists, and returns
// its superuser URL (URL with the database replaced). It is idempotent and
// safe to call concurrently, also from other processes using this package:
// the check and the creation run under a PostgreSQL advisory lock. An
// existing database is left as it is.
func (p *Postgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	if name == "" {
		return "", errors.New("create database: empty name")
	}
	conn, err := pgx.Connect(ctx, p.URL)
	if err != nil {
		return "", fmt.Errorf("create database %s: connect: %w", name, err)
	}
	defer conn.Close(context.Background()) // also releases the advisory lock
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(createDBLock)); err != nil {
		return "", fmt.Errorf("create database %s: lock: %w", name, err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	if !exists {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		var pgErr *pgconn.PgError
		if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42P04") { // duplicate_database
			return "", fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return postgresURL(p.Port, name), nil
}

// Output returns the last 64 KiB of the server's output.
func (p *Postgres) Output() string { return p.srv.output() }

// Stop stops the server with a fast shutdown (killing it after 10s) and
// removes its directory if StartPostgres created it. It returns the first
// call's result on every call, and reports a server that had exited on its
// own before Stop.
func (p *Postgres) Stop() error { return p.srv.stop() }
