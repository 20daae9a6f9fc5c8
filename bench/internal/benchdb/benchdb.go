// Package benchdb gives each benchmark or chaos run a PostgreSQL schema of
// its own: the database URL that selects it, and the schema created and
// migrated with sluice's migrations.
package benchdb

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/schemas"
)

// SchemaURL returns base (a postgres:// URL or a keyword/value string) with
// its search_path set to schema.
func SchemaURL(base, schema string) (string, error) {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			return "", fmt.Errorf("DATABASE_URL: %w", err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return base + " search_path=" + schema, nil
}

// FreshSchema creates schema on admin's database, applies sluice's
// migrations in it and returns base's URL selecting it.
func FreshSchema(ctx context.Context, admin *pgx.Conn, base, schema string) (string, error) {
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return "", fmt.Errorf("create schema %s: %w", schema, err)
	}
	u, err := SchemaURL(base, schema)
	if err != nil {
		return "", err
	}
	if _, err := schemas.Migrate(ctx, u); err != nil {
		return "", fmt.Errorf("migrate %s: %w", schema, err)
	}
	return u, nil
}
