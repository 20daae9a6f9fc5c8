package schemas

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// VersionTable is the table, created in the migrated schema, where goose
// records which migrations are applied.
const VersionTable = "sluice_schema_migrations"

// MigrationNames returns the file name of every embedded migration, in the
// order they apply.
func MigrationNames() []string {
	return embeddedNames(migrationFiles, "migrations", func(file string) (string, bool) {
		return file, strings.HasSuffix(file, ".sql")
	})
}

// Open opens databaseURL with pgx's database/sql driver and pings it within
// ctx. Settings in the URL (e.g. search_path=s, or options=-csearch_path%3Ds)
// apply to every pooled connection.
func Open(ctx context.Context, databaseURL string) (*sql.DB, error) {
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return nil, fmt.Errorf("schemas: open database: %w", err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("schemas: connect to database: %w", err)
	}
	return db, nil
}

// Migrate opens databaseURL, applies every pending migration with MigrateDB
// and closes the connection. It returns the file names it applied, in order
// (empty when the schema was up to date).
func Migrate(ctx context.Context, databaseURL string) ([]string, error) {
	db, err := Open(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return MigrateDB(ctx, db)
}

// MigrateDB applies every pending migration to db and returns the file names
// it applied, in order. Tables, indexes and VersionTable are created in the
// connection's current schema (the first existing schema of its
// search_path), so each schema is migrated independently; every connection
// of db must have the same search_path. Each migration runs in its own
// transaction. Concurrent callers on the same schema are serialised by a
// PostgreSQL advisory lock derived from the schema name (waiting up to a
// minute).
func MigrateDB(ctx context.Context, db *sql.DB) ([]string, error) {
	return migrate(ctx, db, "up", func(ctx context.Context, p *goose.Provider) ([]*goose.MigrationResult, error) {
		return p.Up(ctx)
	})
}

// ResetDB rolls back every applied migration of db's current schema, newest
// first, and returns the file names it rolled back. The version table stays.
func ResetDB(ctx context.Context, db *sql.DB) ([]string, error) {
	return migrate(ctx, db, "down", func(ctx context.Context, p *goose.Provider) ([]*goose.MigrationResult, error) {
		return p.DownTo(ctx, 0)
	})
}

// migrate runs step (named by direction in its error) on a provider of
// db's current schema and returns the file names of the migrations it ran,
// those a failing step ran before its error included.
func migrate(ctx context.Context, db *sql.DB, direction string, step func(context.Context, *goose.Provider) ([]*goose.MigrationResult, error)) ([]string, error) {
	p, err := newProvider(ctx, db)
	if err != nil {
		return nil, err
	}
	results, err := step(ctx, p)
	names := resultNames(results)
	var pe *goose.PartialError
	if errors.As(err, &pe) {
		names = resultNames(pe.Applied)
	}
	if err != nil {
		return names, fmt.Errorf("schemas: migrate %s: %w", direction, err)
	}
	return names, nil
}

// MigrationState is the state of one migration in a schema.
type MigrationState struct {
	Version   int64
	Name      string
	Applied   bool
	AppliedAt time.Time // zero when pending
}

// StatusDB reports every embedded migration and whether it is applied to
// db's current schema, in version order.
func StatusDB(ctx context.Context, db *sql.DB) ([]MigrationState, error) {
	p, err := newProvider(ctx, db)
	if err != nil {
		return nil, err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("schemas: migration status: %w", err)
	}
	out := make([]MigrationState, 0, len(st))
	for _, s := range st {
		out = append(out, MigrationState{
			Version:   s.Source.Version,
			Name:      path.Base(s.Source.Path),
			Applied:   s.State == goose.StateApplied,
			AppliedAt: s.AppliedAt,
		})
	}
	return out, nil
}

func newProvider(ctx context.Context, db *sql.DB) (*goose.Provider, error) {
	// goose looks for its version table in current_schema(); with no
	// existing schema on the search_path that is NULL and goose would
	// match a version table in any schema.
	var schema sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return nil, fmt.Errorf("schemas: read current schema: %w", err)
	}
	if !schema.Valid || schema.String == "" {
		return nil, errors.New("schemas: no schema of the search_path exists; create it first")
	}
	h := fnv.New64a()
	h.Write([]byte(schema.String))
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(lock.DefaultLockID^int64(h.Sum64()>>1)),
		lock.WithLockTimeout(1, 60),
	)
	if err != nil {
		return nil, fmt.Errorf("schemas: migration lock: %w", err)
	}
	fsys, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("schemas: embedded migrations: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName(VersionTable),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("schemas: migration provider: %w", err)
	}
	return p, nil
}

func resultNames(rs []*goose.MigrationResult) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		if r != nil && r.Source != nil {
			out = append(out, path.Base(r.Source.Path))
		}
	}
	return out
}
