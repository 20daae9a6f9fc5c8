package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/schemas"
)

func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no PostgreSQL: DATABASE_URL is unset (CI=true forbids skipping)")
		}
		t.Skip("no PostgreSQL: DATABASE_URL is unset")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := schemas.Open(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	schema := fmt.Sprintf("sluice_cli_%d", time.Now().UnixNano())
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	defer admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE") //nolint:errcheck // best-effort cleanup
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

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
