package main

import (
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
)

func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t)
	ctx := testkit.Context(t)
	admin, schema := pg.DB(t), pg.Schema
	u, err := url.Parse(pg.URL)
	if err != nil {
		t.Fatal(err)
	}

	out, err := runCLI(t, "migrate", "--database-url", u.String(), "--status")
	if err != nil || strings.Count(out, "pending") != len(schemas.MigrationNames()) {
		t.Fatalf("status before: %v\n%s", err, out)
	}
	out, err = runCLI(t, "migrate", "--database-url", u.String())
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	for _, n := range schemas.MigrationNames() {
		if !strings.Contains(out, "applied "+n+"\n") {
			t.Errorf("output lacks %s:\n%s", n, out)
		}
	}
	out, err = runCLI(t, "migrate", "--database-url", u.String())
	if err != nil || strings.TrimSpace(out) != "schema up to date" {
		t.Fatalf("second migrate: %v\n%s", err, out)
	}
	out, err = runCLI(t, "migrate", "--database-url", u.String(), "--status")
	if err != nil || strings.Count(out, " applied ") != len(schemas.MigrationNames()) || strings.Contains(out, "pending") {
		t.Fatalf("status after: %v\n%s", err, out)
	}
	var n int
	if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 18 { // tables and views
		t.Errorf("%d tables in %s, want 18", n, schema)
	}
}

func TestMigrateNeedsDatabase(t *testing.T) {
	t.Parallel()
	_, err := runCLI(t, "migrate", "--database-url", "")
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("err = %v", err)
	}
}

// --help printed the environment's DATABASE_URL, REDIS_URL and S3 secret
// key as flag defaults, passwords included; the values are now read from
// the environment when a command runs, and a flag still overrides them.
func TestHelpHidesSecretsFromEnvironment(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://u:pg-s3cret@127.0.0.1:1/db")
	t.Setenv("REDIS_URL", "redis://:redis-s3cret@127.0.0.1:1/0")
	t.Setenv("S3_SECRET_KEY", "s3-s3cret")
	for _, args := range [][]string{{"demo", "--help"}, {"run", "--help"}, {"dlq", "archive", "--help"}, {"migrate", "-h"}} {
		out, err := runCLI(t, args...)
		if err != nil || !strings.Contains(out, "--database-url") {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if strings.Contains(out, "s3cret") {
			t.Errorf("%v printed a secret:\n%s", args, out)
		}
	}
	// The environment is still used: migrate connects to DATABASE_URL ...
	_, err := runCLI(t, "migrate")
	singleLine(t, err, "postgres at 127.0.0.1:1: ")
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error shows the password: %v", err)
	}
	// ... and a flag, even empty, overrides it.
	_, err = runCLI(t, "migrate", "--database-url", "")
	singleLine(t, err, "no database: set DATABASE_URL or --database-url")
	_, err = runCLI(t, "smap", "progress", "p1", "--json", "--redis-url", "redis://127.0.0.1:1/x")
	singleLine(t, err, `invalid database number: "x"`)
}

// Several sluice migrate against one fresh schema at once (two deploys
// starting together): each migration is applied exactly once, by one of
// them, every command succeeds, and the schema ends complete.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t)
	const n = 3
	outs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { outs[i], errs[i] = runCLI(t, "migrate", "--database-url", pg.URL) })
	}
	wg.Wait()
	count := map[string]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("migrate %d: %v\n%s", i, errs[i], outs[i])
		}
		for _, l := range strings.Split(strings.TrimSpace(outs[i]), "\n") {
			if name, ok := strings.CutPrefix(l, "applied "); ok {
				count[name]++
			} else if l != "schema up to date" {
				t.Errorf("migrate %d printed %q", i, l)
			}
		}
	}
	for _, name := range schemas.MigrationNames() {
		if count[name] != 1 {
			t.Errorf("%s applied %d times, want once (outputs %q)", name, count[name], outs)
		}
	}
	out, err := runCLI(t, "migrate", "--database-url", pg.URL, "--status")
	if err != nil || strings.Contains(out, "pending") || strings.Count(out, " applied ") != len(schemas.MigrationNames()) {
		t.Fatalf("status after: %v\n%s", err, out)
	}
}
