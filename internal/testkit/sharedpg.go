package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/localsvc"
)

// SharedPostgresEnv names the environment variable MainWithPostgres sets to
// the URL of the server it started; NewPostgresServer reports a server
// with that URL as Kind "local-shared".
const SharedPostgresEnv = "SLUICE_TESTKIT_SHARED_POSTGRES"

// MainWithPostgres is for the TestMain of a package whose tests use
// PostgreSQL: os.Exit(testkit.MainWithPostgres(m)). When DATABASE_URL is
// unset and the PostgreSQL binaries are installed (initdb and postgres on
// PATH or in /usr/lib/postgresql/*/bin), it starts one throwaway local
// server for the whole test binary (as localsvc.StartPostgres: a temporary
// directory, a free loopback port, trust authentication, run as the
// "postgres" OS user when the tests run as root), sets DATABASE_URL (and
// SharedPostgresEnv) to its URL for the process — so NewPostgres and tests
// that read DATABASE_URL use it, each in its own schema, instead of
// starting a server per test or skipping — runs the tests and stops the
// server. Child processes of the tests inherit the variables. Otherwise
// (DATABASE_URL set, no binaries, the server failed: said on stderr) it
// just runs the tests, whose services then come from the usual sources.
// It returns m.Run's exit code.
func MainWithPostgres(m *testing.M) int {
	return mainWithPostgres(m.Run, os.Stderr)
}

// mainWithPostgres is MainWithPostgres with run for m.Run and the
// diagnostics on stderr.
func mainWithPostgres(run func() int, stderr io.Writer) int {
	if os.Getenv("DATABASE_URL") != "" {
		return run()
	}
	stop, err := startSharedPostgres()
	if err != nil {
		if !errors.Is(err, localsvc.ErrNotFound) {
			fmt.Fprintf(stderr, "testkit: no shared local PostgreSQL: %v\n", err)
		}
		return run()
	}
	defer stop()
	return run()
}

// startSharedPostgres starts the local server and points DATABASE_URL and
// SharedPostgresEnv at it; stop stops it and unsets them.
func startSharedPostgres() (stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), localStartTimeout)
	defer cancel()
	pg, err := localsvc.StartPostgres(ctx, localsvc.PostgresOptions{})
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"DATABASE_URL", SharedPostgresEnv} {
		if err := os.Setenv(k, pg.URL); err != nil {
			_ = pg.Stop()
			return nil, fmt.Errorf("set %s: %w", k, err)
		}
	}
	return func() {
		_ = os.Unsetenv("DATABASE_URL")
		_ = os.Unsetenv(SharedPostgresEnv)
		if err := pg.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testkit: stop the shared local PostgreSQL: %v\n", err)
		}
	}, nil
}

// NewPrivatePostgresServer returns a fresh local PostgreSQL server of t's
// own, whatever DATABASE_URL says (for a test that needs a database no
// other test touched, e.g. one where no extension is installed yet): the
// local binaries started as NewPostgresServer starts them, stopped on
// cleanup. Without binaries the test is skipped (failed under CI=true).
func NewPrivatePostgresServer(t testing.TB) *PostgresServer {
	t.Helper()
	u, err := startLocalPostgres(t)
	if err != nil {
		var why reasons
		why.addLocal(t, "PostgreSQL", err)
		unavailable(t, "no private PostgreSQL: %s", why)
		return nil
	}
	s := &PostgresServer{URL: u, Real: true, Kind: "local"}
	t.Logf("testkit: %s", s)
	return s
}
