package schemas

import (
	"context"
	"database/sql"
	"fmt"
)

// MigrateUpTo applies the pending migrations of db up to version, for tests
// that need a schema as an older release left it.
func MigrateUpTo(ctx context.Context, db *sql.DB, version int64) error {
	p, err := newProvider(ctx, db)
	if err != nil {
		return err
	}
	if _, err := p.UpTo(ctx, version); err != nil {
		return fmt.Errorf("schemas: migrate up to %d: %w", version, err)
	}
	return nil
}

// MigrateDownTo rolls db back to version.
func MigrateDownTo(ctx context.Context, db *sql.DB, version int64) error {
	p, err := newProvider(ctx, db)
	if err != nil {
		return err
	}
	if _, err := p.DownTo(ctx, version); err != nil {
		return fmt.Errorf("schemas: migrate down to %d: %w", version, err)
	}
	return nil
}
