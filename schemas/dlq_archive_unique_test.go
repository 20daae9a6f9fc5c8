package schemas_test

import (
	"testing"

	"github.com/sluicehq/sluice/schemas"
)

// Migration 00008 applies over a dlq_archive holding copies of one source
// record's dead letter (other DLQ offsets): the first archived copy stays,
// rows of other source records and rows without source coordinates all
// stay, and a further copy is refused by the new unique index.
func TestDLQArchiveUniqueMigrationDedupes(t *testing.T) {
	t.Parallel()
	ctx, db := migratedUpTo(t, 7)
	if _, err := db.ExecContext(ctx, `INSERT INTO dlq_archive (dlq_topic, dlq_partition, dlq_offset, source_topic, source_partition, source_offset, reason, payload)
		VALUES ('bronze.dlq', 0, 0, 'bronze.ta', 1, 5, 'sanity_fail', 'a'),
		       ('bronze.dlq', 0, 1, 'bronze.ta', 1, 6, 'sanity_fail', 'b'),
		       ('bronze.dlq', 1, 0, 'bronze.ta', 1, 5, 'sanity_fail', 'a copy'),
		       ('bronze.dlq', 0, 2, 'bronze.ta', 1, 5, 'sanity_fail', 'another copy'),
		       ('other.dlq',  0, 0, 'bronze.ta', 1, 5, 'sanity_fail', 'other pipeline'),
		       ('bronze.dlq', 0, 3, NULL, NULL, NULL, 'exception', 'no source'),
		       ('bronze.dlq', 0, 4, NULL, NULL, NULL, 'exception', 'no source either')`); err != nil {
		t.Fatal(err)
	}
	applied, err := schemas.MigrateDB(ctx, db)
	if err != nil || len(applied) == 0 || applied[0] != "00008_dlq_archive_unique.sql" {
		t.Fatalf("applied %v, %v", applied, err)
	}
	var payloads string
	if err := db.QueryRowContext(ctx, `SELECT string_agg(convert_from(payload, 'UTF8'), ',' ORDER BY id) FROM dlq_archive`).Scan(&payloads); err != nil ||
		payloads != "a,b,other pipeline,no source,no source either" {
		t.Fatalf("rows after the migration: %q (%v)", payloads, err)
	}
	insert := func(redrives int) (int64, error) {
		r, err := db.ExecContext(ctx, `INSERT INTO dlq_archive (dlq_topic, dlq_partition, dlq_offset, source_topic, source_partition, source_offset, reason, payload, redrive_count)
			VALUES ('bronze.dlq', 1, 7, 'bronze.ta', 1, 5, 'sanity_fail', 'late copy', $1) ON CONFLICT DO NOTHING`, redrives)
		if err != nil {
			return 0, err
		}
		return r.RowsAffected()
	}
	if n, err := insert(0); err != nil || n != 0 {
		t.Fatalf("a further copy: %d inserted (%v), want 0", n, err)
	}
	if n, err := insert(1); err != nil || n != 1 {
		t.Fatalf("the same coordinates with another redrive count: %d inserted (%v), want 1", n, err)
	}
	if err := schemas.MigrateDownTo(ctx, db, 7); err != nil {
		t.Fatal(err)
	}
	var cols int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema()
		AND table_name = 'dlq_archive' AND column_name = 'redrive_count'`).Scan(&cols); err != nil || cols != 0 {
		t.Fatalf("redrive_count after down: %d (%v)", cols, err)
	}
}
