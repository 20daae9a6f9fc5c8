package dlq_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages/dlq"
)

// recreate deletes e's DLQ topic and creates it again with 2 partitions (an
// operator's purge), and returns e with a new producer: kgo does not adopt a
// recreated topic in a client that knew the old one.
func recreate(t *testing.T, e env) env {
	t.Helper()
	ctx := ctxT(t)
	adm := e.k.Admin(t)
	if _, err := adm.DeleteTopic(ctx, e.dlqTopic); err != nil {
		t.Fatalf("delete %s: %v", e.dlqTopic, err)
	}
	testkit.WaitFor(t, 30*time.Second, "the DLQ topic to be recreated", func() bool {
		r, err := adm.CreateTopic(ctx, 2, -1, nil, e.dlqTopic)
		return err == nil && r.Err == nil
	})
	testkit.WaitFor(t, 30*time.Second, "the recreated DLQ topic to have leaders", func() bool {
		td, err := e.k.Admin(t).ListTopics(ctx, e.dlqTopic)
		if err != nil || td[e.dlqTopic].Err != nil || len(td[e.dlqTopic].Partitions) != 2 {
			return false
		}
		for _, p := range td[e.dlqTopic].Partitions {
			if p.Leader < 0 || p.Err != nil {
				return false
			}
		}
		return true
	})
	e.cl = e.k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	return e
}

func topicIDs(t *testing.T, db *pgxpool.Pool, topic string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(ctxT(t), `SELECT count(DISTINCT dlq_topic_id) FROM dlq_archive WHERE dlq_topic = $1`, topic).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func archiveOnce(t *testing.T, e env, db *pgxpool.Pool, group string, want dlq.ArchiveResult, wantRows int) {
	t.Helper()
	res, err := dlq.ArchiveOnce(ctxT(t), e.opts, db, e.dlqTopic, group)
	if err != nil {
		t.Fatalf("ArchiveOnce(%s): %v", group, err)
	}
	if n := rowCount(t, db, e.dlqTopic); res != want || n != wantRows {
		t.Fatalf("ArchiveOnce(%s) = %+v with %d rows; want %+v and %d rows", group, res, n, want, wantRows)
	}
}

// A DLQ topic deleted and recreated starts its offsets at 0 again: its
// records are new rows although rows with the same coordinates (and here the
// same content) exist, and re-reading them inserts nothing.
func TestArchiveRecreatedTopic(t *testing.T) {
	t.Parallel()
	db := archiveDB(t)
	e := newEnv(t)
	group := testkit.Name(t, "g")
	e.write(t, e.dlqTopic, fixture(e.src)...)
	archiveOnce(t, e, db, group, dlq.ArchiveResult{Read: 5, Inserted: 5}, 5)

	e = recreate(t, e)
	// The same five records again (same partitions, so the same offsets)
	// and one more.
	e.write(t, e.dlqTopic, fixture(e.src)...)
	e.write(t, e.dlqTopic, spec{key: "NEW", value: `{"n":1}`, partition: 1, reason: "exception", redrives: -1})
	archiveOnce(t, e, db, group, dlq.ArchiveResult{Read: 6, Inserted: 6}, 11)
	if n := topicIDs(t, db, e.dlqTopic); n != 2 {
		t.Fatalf("%d distinct topic IDs, want 2", n)
	}

	// Re-reading (a crash before the commit, another archiver group)
	// inserts nothing.
	archiveOnce(t, e, db, testkit.Name(t, "other"), dlq.ArchiveResult{Read: 6, Inserted: 0}, 11)
	archiveOnce(t, e, db, group, dlq.ArchiveResult{}, 11)
}

// Rows archived before topic IDs were recorded hold the zero ID: re-reading
// their records does not duplicate them, while a recreated topic's new
// records at the same coordinates are archived.
func TestArchivePreMigrationRows(t *testing.T) {
	t.Parallel()
	db := archiveDB(t)
	e := newEnv(t)
	e.write(t, e.dlqTopic, fixture(e.src)...)
	archiveOnce(t, e, db, testkit.Name(t, "g1"), dlq.ArchiveResult{Read: 5, Inserted: 5}, 5)
	// What migration 00005 leaves of rows archived before it.
	if _, err := db.Exec(ctxT(t), `UPDATE dlq_archive SET dlq_topic_id = DEFAULT WHERE dlq_topic = $1`, e.dlqTopic); err != nil {
		t.Fatal(err)
	}
	archiveOnce(t, e, db, testkit.Name(t, "g2"), dlq.ArchiveResult{Read: 5, Inserted: 0}, 5)

	e = recreate(t, e)
	var specs []spec
	for _, s := range fixture(e.src) {
		s.value, s.failedAt = `{"new":true}`, s.failedAt.Add(24*time.Hour)
		specs = append(specs, s)
	}
	e.write(t, e.dlqTopic, specs...)
	archiveOnce(t, e, db, testkit.Name(t, "g2"), dlq.ArchiveResult{Read: 5, Inserted: 5}, 10)
	archiveOnce(t, e, db, testkit.Name(t, "g3"), dlq.ArchiveResult{Read: 5, Inserted: 0}, 10)
}

// A running Archive follows the topic through a delete and recreate.
func TestArchiveFollowsRecreatedTopic(t *testing.T) {
	t.Parallel()
	db := archiveDB(t)
	e := newEnv(t)
	group := testkit.Name(t, "g")
	e.write(t, e.dlqTopic, fixture(e.src)...)

	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- dlq.Archive(ctx, e.opts, db, e.dlqTopic, group) }()
	testkit.WaitFor(t, 20*time.Second, "5 rows", func() bool { return rowCount(t, db, e.dlqTopic) == 5 })

	e = recreate(t, e)
	e.write(t, e.dlqTopic, fixture(e.src)...)
	testkit.WaitFor(t, 40*time.Second, "10 rows", func() bool { return rowCount(t, db, e.dlqTopic) >= 10 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Archive returned %v after cancel, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Archive did not return after cancel")
	}
	if n := rowCount(t, db, e.dlqTopic); n != 10 {
		t.Fatalf("%d rows, want 10", n)
	}
	archiveOnce(t, e, db, group, dlq.ArchiveResult{}, 10)
}
