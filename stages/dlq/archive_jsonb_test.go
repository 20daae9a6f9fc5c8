package dlq_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages/dlq"
)

// refusedJSON are DLQ values that Go's json.Valid accepts and PostgreSQL's
// jsonb refuses (with SQLSTATE 22P02, 22003 and 22P05): exactly the
// malformed inputs that get dead-lettered.
func refusedJSON() map[string]string {
	return map[string]string{
		"SURROGATE": `{"name":"\ud800"}`,
		"HUGE":      `{"price":1e1000000}`,
		"NUL":       `{"name":"a\u0000b"}`,
	}
}

// jsonbFixture puts valid JSON records before, between and after the
// refused values, on both DLQ partitions.
func jsonbFixture(e env) []spec {
	bad := refusedJSON()
	n := int64(0)
	s := func(key, value string, partition int32) spec {
		n++ // each its own source record
		return spec{key: key, value: value, partition: partition, reason: "decode_error", srcTopic: e.src, srcOffset: n, failedAt: t0, redrives: -1}
	}
	return []spec{
		s("A", `{"n":1}`, 0),
		s("SURROGATE", bad["SURROGATE"], 0),
		s("B", `{"n":2}`, 0),
		s("C", `{"n":3}`, 1),
		s("HUGE", bad["HUGE"], 1),
		s("NUL", bad["NUL"], 1),
		s("D", `{"n":4}`, 1),
	}
}

// checkJSONBRows asserts that every record of jsonbFixture has its row: the
// refused values with their bytes intact and payload_json NULL, the others
// with payload_json set.
func checkJSONBRows(t *testing.T, db *pgxpool.Pool, e env) {
	t.Helper()
	bad := refusedJSON()
	for _, s := range jsonbFixture(e) {
		var (
			payload []byte
			asJSON  *string
		)
		err := db.QueryRow(ctxT(t), `SELECT payload, payload_json::text FROM dlq_archive WHERE dlq_topic = $1 AND record_key = $2`,
			e.dlqTopic, s.key).Scan(&payload, &asJSON)
		if err != nil {
			t.Fatalf("row %s: %v", s.key, err)
		}
		if string(payload) != s.value {
			t.Errorf("row %s: payload %q, want %q", s.key, payload, s.value)
		}
		if _, refused := bad[s.key]; refused && asJSON != nil {
			t.Errorf("row %s: payload_json %q, want NULL", s.key, *asJSON)
		}
		if _, refused := bad[s.key]; !refused && asJSON == nil {
			t.Errorf("row %s: payload_json NULL, want the value", s.key)
		}
	}
}

// A value PostgreSQL refuses as jsonb is archived with payload_json NULL
// and does not keep the rest of its batch (or any later run) from being
// archived and committed.
func TestArchiveJSONBRefusedValues(t *testing.T) {
	t.Parallel()
	db := archiveDB(t)
	e := newEnv(t)
	e.write(t, e.dlqTopic, jsonbFixture(e)...)
	group := testkit.Name(t, "g")
	n := len(jsonbFixture(e))

	archiveOnce(t, e, db, group, dlq.ArchiveResult{Read: n, Inserted: n}, n)
	checkJSONBRows(t, db, e)
	// The offsets were committed: the group has nothing left to read.
	archiveOnce(t, e, db, group, dlq.ArchiveResult{}, n)
	// Another group re-reads everything and adds nothing.
	archiveOnce(t, e, db, testkit.Name(t, "other"), dlq.ArchiveResult{Read: n, Inserted: 0}, n)
	checkJSONBRows(t, db, e)

	// A later record is archived by the next run.
	e.write(t, e.dlqTopic, spec{key: "E", value: `{"n":5}`, partition: 0, reason: "exception", redrives: -1})
	archiveOnce(t, e, db, group, dlq.ArchiveResult{Read: 1, Inserted: 1}, n+1)
}

// The continuous archiver keeps running past refused values.
func TestArchiveJSONBRefusedValuesContinuous(t *testing.T) {
	t.Parallel()
	db := archiveDB(t)
	e := newEnv(t)
	e.write(t, e.dlqTopic, jsonbFixture(e)...)
	group := testkit.Name(t, "g")
	n := len(jsonbFixture(e))

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- dlq.Archive(ctx, e.opts, db, e.dlqTopic, group) }()
	deadline := time.Now().Add(30 * time.Second)
	for rowCount(t, db, e.dlqTopic) < n && time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("Archive returned %v before it was cancelled", err)
		case <-time.After(50 * time.Millisecond):
		}
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
	if got := rowCount(t, db, e.dlqTopic); got != n {
		t.Fatalf("%d rows, want %d", got, n)
	}
	checkJSONBRows(t, db, e)
	archiveOnce(t, e, db, group, dlq.ArchiveResult{}, n)
}
