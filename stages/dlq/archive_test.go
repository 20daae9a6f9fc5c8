package dlq_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/stages/dlq"
)

// archiveDB returns a pool on a private schema migrated with the project's
// migrations (which create dlq_archive).
func archiveDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pg := testkit.NewPostgres(t)
	if _, err := schemas.Migrate(ctxT(t), pg.URL); err != nil {
		t.Fatal(err)
	}
	return pg.Pool
}

func rowCount(t *testing.T, db *pgxpool.Pool, topic string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(ctxT(t), `SELECT count(*) FROM dlq_archive WHERE dlq_topic = $1`, topic).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestArchiveOnceIsIdempotent(t *testing.T) {
	t.Parallel()
	db := archiveDB(t)
	e := newEnv(t)
	dlqTopic, src := e.dlqTopic, e.src
	group, other := testkit.Name(t, "g"), testkit.Name(t, "other")
	e.write(t, dlqTopic, fixture(src)...)
	ctx := ctxT(t)

	res, err := dlq.ArchiveOnce(ctx, e.opts, db, dlqTopic, group)
	if err != nil {
		t.Fatal(err)
	}
	if res != (dlq.ArchiveResult{Read: 5, Inserted: 5}) || rowCount(t, db, dlqTopic) != 5 {
		t.Fatalf("first run %+v, %d rows; want 5 read, 5 inserted, 5 rows", res, rowCount(t, db, dlqTopic))
	}

	// The group committed: nothing left to read.
	res, err = dlq.ArchiveOnce(ctx, e.opts, db, dlqTopic, group)
	if err != nil {
		t.Fatal(err)
	}
	if res != (dlq.ArchiveResult{}) {
		t.Fatalf("second run %+v, want nothing read", res)
	}
	// Another group reads everything again; the table ignores the repeats.
	res, err = dlq.ArchiveOnce(ctx, e.opts, db, dlqTopic, other)
	if err != nil {
		t.Fatal(err)
	}
	if res != (dlq.ArchiveResult{Read: 5, Inserted: 0}) || rowCount(t, db, dlqTopic) != 5 {
		t.Fatalf("re-read run %+v, %d rows; want 5 read, 0 inserted, 5 rows", res, rowCount(t, db, dlqTopic))
	}
	// A new DLQ record is archived by the next run.
	e.write(t, dlqTopic, spec{key: "NEW", value: `{"n":1}`, partition: 1, reason: "exception", redrives: -1})
	res, err = dlq.ArchiveOnce(ctx, e.opts, db, dlqTopic, group)
	if err != nil {
		t.Fatal(err)
	}
	if res != (dlq.ArchiveResult{Read: 1, Inserted: 1}) || rowCount(t, db, dlqTopic) != 6 {
		t.Fatalf("third run %+v, %d rows; want 1/1 and 6 rows", res, rowCount(t, db, dlqTopic))
	}

	// The columns of one row.
	var (
		part, srcPart, attempts     int
		off, srcOff                 int64
		srcTopic, reason, rule      string
		errMsg, stage, key, payload string
		asJSON                      *string
		failedAt                    time.Time
	)
	err = db.QueryRow(ctx, `SELECT dlq_partition, dlq_offset, source_topic, source_partition, source_offset, reason, rule_id,
		error_msg, stage, attempts, record_key, convert_from(payload, 'UTF8'), payload_json::text, failed_at
		FROM dlq_archive WHERE dlq_topic = $1 AND record_key = 'FPT'`, dlqTopic).Scan(
		&part, &off, &srcTopic, &srcPart, &srcOff, &reason, &rule, &errMsg, &stage, &attempts, &key, &payload, &asJSON, &failedAt)
	if err != nil {
		t.Fatal(err)
	}
	if part != 0 || off != 0 || srcTopic != src || srcPart != 1 || srcOff != 5 || reason != "sanity_fail" || rule != "ta.symbol" ||
		errMsg != "error of FPT" || stage != "validate" || attempts != 1 || key != "FPT" || payload != `{"task_type":"ta.bar"}` ||
		asJSON == nil || *asJSON != `{"task_type": "ta.bar"}` || !failedAt.Equal(t0) {
		t.Fatalf("FPT row: %d %d %q %d %d %q %q %q %q %d %q %q %v %v", part, off, srcTopic, srcPart, srcOff, reason, rule, errMsg, stage, attempts, key, payload, asJSON, failedAt)
	}
	// A value that is not JSON keeps its bytes and has no payload_json;
	// absent source headers are NULL.
	var notJSON *string
	var vnmPayload []byte
	if err := db.QueryRow(ctx, `SELECT payload, payload_json::text FROM dlq_archive WHERE dlq_topic = $1 AND record_key = 'VNM'`, dlqTopic).Scan(&vnmPayload, &notJSON); err != nil {
		t.Fatal(err)
	}
	if string(vnmPayload) != "not json" || notJSON != nil {
		t.Fatalf("VNM payload %q json %v", vnmPayload, notJSON)
	}
	var nullSource bool
	if err := db.QueryRow(ctx, `SELECT source_topic IS NULL AND source_partition IS NULL AND source_offset IS NULL AND failed_at IS NULL
		FROM dlq_archive WHERE dlq_topic = $1 AND record_key = 'NEW'`, dlqTopic).Scan(&nullSource); err != nil || !nullSource {
		t.Fatalf("NEW row source columns not NULL (%v)", err)
	}
}

func TestArchiveRunsUntilCancelled(t *testing.T) {
	t.Parallel()
	db := archiveDB(t)
	e := newEnv(t)
	dlqTopic, src := e.dlqTopic, e.src
	group := testkit.Name(t, "g")
	e.write(t, dlqTopic, fixture(src)...)

	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- dlq.Archive(ctx, e.opts, db, dlqTopic, group) }()
	deadline := time.Now().Add(20 * time.Second)
	for rowCount(t, db, dlqTopic) < 5 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	// Records written while it runs are archived too.
	e.write(t, dlqTopic, spec{key: "LATE", value: `{}`, reason: "exception", redrives: -1})
	for rowCount(t, db, dlqTopic) < 6 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Archive returned %v after cancel, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Archive did not return after cancel")
	}
	if n := rowCount(t, db, dlqTopic); n != 6 {
		t.Fatalf("%d rows, want 6", n)
	}
	// Its commits stick: a one-shot run of the same group has nothing to do.
	res, err := dlq.ArchiveOnce(ctxT(t), e.opts, db, dlqTopic, group)
	if err != nil || res.Read != 0 {
		t.Fatalf("after Archive, ArchiveOnce read %d (%v), want 0", res.Read, err)
	}
}

// A DLQ written in transactions (the transactional runner's) is read with
// read_committed: the aborted record is not archived, and both archivers
// commit past the trailing commit marker, so the group reaches the end and
// a one-shot run after them has nothing to do.
func TestArchiveTransactionalDLQ(t *testing.T) {
	t.Parallel()
	db := archiveDB(t)
	e := newEnv(t)
	writeTransactional(t, e)
	ends, err := e.k.Admin(t).ListEndOffsets(ctxT(t), e.dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(e.dlqTopic, 0)
	atEnd := func(group string) bool { return testkit.Committed(t, e.k.Admin(t), group, e.dlqTopic)[0] == end.Offset }

	once := testkit.Name(t, "once")
	archiveOnce(t, e, db, once, dlq.ArchiveResult{Read: 3, Inserted: 3}, 3)
	var keys []string
	rows, err := db.Query(ctxT(t), `SELECT record_key FROM dlq_archive WHERE dlq_topic = $1 ORDER BY dlq_offset`, e.dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if strings.Join(keys, ",") != "a,b,c" || !atEnd(once) {
		t.Fatalf("archived %v, group at %v; want a, b, c and the group at the end %d", keys, testkit.Committed(t, e.k.Admin(t), once, e.dlqTopic), end.Offset)
	}
	archiveOnce(t, e, db, once, dlq.ArchiveResult{}, 3)

	cont := testkit.Name(t, "cont")
	stop := testkit.RunInBackground(t, "archive", func(ctx context.Context) error { return dlq.Archive(ctx, e.opts, db, e.dlqTopic, cont) })
	testkit.WaitFor(t, 30*time.Second, "the continuous archiver's group at the end", func() bool { return atEnd(cont) })
	if err := stop(); err != nil {
		t.Fatalf("Archive: %v", err)
	}
	archiveOnce(t, e, db, cont, dlq.ArchiveResult{}, 3)
}

// A database error ends a one-shot run with the error (a cron job must not
// hang); the continuous archiver retries it with the runtime's backoff and
// archives everything once the database recovers (here: once the table is
// created).
func TestArchiveDatabaseErrors(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t) // not migrated: no dlq_archive table yet
	e := newEnv(t)
	e.write(t, e.dlqTopic, fixture(e.src)...)
	group := testkit.Name(t, "g")
	if res, err := dlq.ArchiveOnce(ctxT(t), e.opts, pg.Pool, e.dlqTopic, group); err == nil || !strings.Contains(err.Error(), "dlq_archive") {
		t.Fatalf("ArchiveOnce without the table = %+v, %v; want the database's error", res, err)
	}

	retried := make(chan struct{}, 1)
	log := slog.New(handlerFunc(func(r slog.Record) {
		if r.Message == "sink write failed, retrying" {
			select {
			case retried <- struct{}{}:
			default:
			}
		}
	}))
	stop := testkit.RunInBackground(t, "archive", func(ctx context.Context) error {
		return dlq.Archive(ctx, e.opts, pg.Pool, e.dlqTopic, group, dlq.ArchiveLogger(log))
	})
	select {
	case <-retried:
	case <-ctxT(t).Done():
		t.Fatal("the archiver did not retry the failed write")
	}
	if _, err := schemas.Migrate(ctxT(t), pg.URL); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "5 rows", func() bool { return rowCount(t, pg.Pool, e.dlqTopic) == 5 })
	if err := stop(); err != nil {
		t.Fatalf("Archive: %v", err)
	}
}

// handlerFunc is a slog.Handler that passes every record to its function.
type handlerFunc func(slog.Record)

func (h handlerFunc) Enabled(context.Context, slog.Level) bool      { return true }
func (h handlerFunc) Handle(_ context.Context, r slog.Record) error { h(r); return nil }
func (h handlerFunc) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h handlerFunc) WithGroup(string) slog.Handler                 { return h }

// Copies of one source record's dead letter (the same source coordinates
// and redrive count at other DLQ offsets, left by a member that crashed
// before its commit) are archived once; a dead letter of the same source
// coordinates with another redrive count, and dead letters without source
// coordinates, each get their row.
func TestArchiveSkipsCopiesOfASourceRecord(t *testing.T) {
	t.Parallel()
	db := archiveDB(t)
	e := newEnv(t)
	dlqTopic, src := e.dlqTopic, e.src
	e.write(t, dlqTopic,
		spec{key: "FPT", value: `{"n":1}`, partition: 0, reason: "sanity_fail", srcTopic: src, srcPartition: 1, srcOffset: 5, failedAt: t0, redrives: -1},
		spec{key: "FPT", value: `{"n":1}`, partition: 1, reason: "sanity_fail", srcTopic: src, srcPartition: 1, srcOffset: 5, failedAt: t0.Add(time.Second), redrives: -1},
		spec{key: "FPT", value: `{"n":1}`, partition: 0, reason: "sanity_fail", srcTopic: src, srcPartition: 1, srcOffset: 5, failedAt: t0.Add(2 * time.Second), redrives: 0},
		spec{key: "FPT", value: `{"n":1}`, partition: 0, reason: "sanity_fail", srcTopic: src, srcPartition: 1, srcOffset: 5, failedAt: t0, redrives: 1},
		spec{key: "MWG", value: `{"x":2}`, partition: 1, reason: "exception", redrives: -1},
		spec{key: "MWG", value: `{"x":2}`, partition: 1, reason: "exception", redrives: -1},
	)
	res, err := dlq.ArchiveOnce(ctxT(t), e.opts, db, dlqTopic, testkit.Name(t, "g"))
	if err != nil {
		t.Fatal(err)
	}
	if res != (dlq.ArchiveResult{Read: 6, Inserted: 4}) || rowCount(t, db, dlqTopic) != 4 {
		t.Fatalf("run %+v, %d rows; want 6 read, 4 inserted, 4 rows", res, rowCount(t, db, dlqTopic))
	}
	var fpt string
	if err := db.QueryRow(ctxT(t), `SELECT string_agg(redrive_count::text, ',' ORDER BY redrive_count) FROM dlq_archive
		WHERE dlq_topic = $1 AND record_key = 'FPT'`, dlqTopic).Scan(&fpt); err != nil || fpt != "0,1" {
		t.Fatalf("FPT rows by redrive count: %q (%v), want 0,1", fpt, err)
	}
}
