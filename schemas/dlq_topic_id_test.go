package schemas_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/sluicehq/sluice/schemas"
)

// Migration 00005 applies over a dlq_archive holding rows of the old key:
// they get the zero topic ID and stay unique by coordinates, while a row of
// a recreated topic (another ID) at the same coordinates is accepted; its
// Down keeps the earliest row of each coordinates.
// migratedUpTo returns a connection to a fresh schema migrated up to
// version, closed when the test ends, and a context of a minute.
func migratedUpTo(t *testing.T, version int64) (context.Context, *sql.DB) {
	t.Helper()
	_, dbURL, _ := freshSchema(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db, err := schemas.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := schemas.MigrateUpTo(ctx, db, version); err != nil {
		t.Fatal(err)
	}
	return ctx, db
}

func TestDLQTopicIDMigrationOverOldRows(t *testing.T) {
	t.Parallel()
	ctx, db := migratedUpTo(t, 4)
	if _, err := db.ExecContext(ctx, `INSERT INTO dlq_archive (dlq_topic, dlq_partition, dlq_offset, reason, payload)
		VALUES ('bronze.dlq', 0, 0, 'sanity_fail', 'a'), ('bronze.dlq', 0, 1, 'sanity_fail', 'b')`); err != nil {
		t.Fatal(err)
	}
	applied, err := schemas.MigrateDB(ctx, db)
	if err != nil || len(applied) == 0 || applied[0] != "00005_dlq_archive_topic_id.sql" {
		t.Fatalf("applied %v, %v", applied, err)
	}
	var zero int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM dlq_archive WHERE dlq_topic_id = '00000000-0000-0000-0000-000000000000'`).Scan(&zero); err != nil || zero != 2 {
		t.Fatalf("%d rows with the zero topic ID (%v), want 2", zero, err)
	}

	insert := func(id string) (int64, error) {
		r, err := db.ExecContext(ctx, `INSERT INTO dlq_archive (dlq_topic, dlq_partition, dlq_offset, reason, payload, dlq_topic_id)
			VALUES ('bronze.dlq', 0, 0, 'exception', 'c', $1)
			ON CONFLICT (dlq_topic, dlq_partition, dlq_offset, dlq_topic_id) DO NOTHING`, id)
		if err != nil {
			return 0, err
		}
		return r.RowsAffected()
	}
	if n, err := insert("00000000-0000-0000-0000-000000000000"); err != nil || n != 0 {
		t.Fatalf("old coordinates with the zero ID: %d inserted (%v), want 0", n, err)
	}
	for i, want := range []int64{1, 0} {
		if n, err := insert("5385c656-7a40-4604-9730-515a0d261473"); err != nil || n != want {
			t.Fatalf("recreated topic's row, try %d: %d inserted (%v), want %d", i+1, n, err, want)
		}
	}
	var rows int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM dlq_archive`).Scan(&rows); err != nil || rows != 3 {
		t.Fatalf("%d rows (%v), want 3", rows, err)
	}

	// Down to 4 restores the old key, keeping the earliest row of each
	// coordinates.
	if err := schemas.MigrateDownTo(ctx, db, 4); err != nil {
		t.Fatal(err)
	}
	var payloads string
	if err := db.QueryRowContext(ctx, `SELECT string_agg(convert_from(payload, 'UTF8'), ',' ORDER BY id) FROM dlq_archive`).Scan(&payloads); err != nil || payloads != "a,b" {
		t.Fatalf("rows after down: %q (%v), want a,b", payloads, err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO dlq_archive (dlq_topic, dlq_partition, dlq_offset, reason, payload)
		VALUES ('bronze.dlq', 0, 0, 'exception', 'c') ON CONFLICT (dlq_topic, dlq_partition, dlq_offset) DO NOTHING`); err != nil {
		t.Fatalf("old key after down: %v", err)
	}
}
