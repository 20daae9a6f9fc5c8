package main

import (
	"net/url"
	"strings"
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
	if n != 6 {
		t.Errorf("%d tables in %s, want 6", n, schema)
	}
}

func TestMigrateNeedsDatabase(t *testing.T) {
	t.Parallel()
	_, err := runCLI(t, "migrate", "--database-url", "")
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("err = %v", err)
	}
}
