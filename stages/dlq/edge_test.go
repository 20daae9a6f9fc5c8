package dlq_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/dlq"
)

// A dlq.attempts beyond the range of the attempts column (INT) must not
// stop the archiver on every run: the row is archived with the largest
// value the column holds.
func TestArchiveOutOfRangeAttempts(t *testing.T) {
	t.Parallel()
	db := archiveDB(t)
	e := newEnv(t)
	e.write(t, e.dlqTopic,
		spec{key: "a", value: "1", reason: "exception", srcTopic: e.src, srcOffset: 1, failedAt: t0, redrives: -1,
			extra: []kgo.RecordHeader{{Key: stages.HeaderAttempts, Value: []byte("3000000000")}}},
		spec{key: "b", value: "2", reason: "exception", srcTopic: e.src, srcOffset: 2, failedAt: t0, redrives: -1})
	res, err := dlq.ArchiveOnce(ctxT(t), e.opts, db, e.dlqTopic, testkit.Name(t, "g"))
	if err != nil || res != (dlq.ArchiveResult{Read: 2, Inserted: 2}) {
		t.Fatalf("archive: %+v, %v; want 2 read and inserted", res, err)
	}
	var attempts int64
	if err := db.QueryRow(ctxT(t), `SELECT attempts FROM dlq_archive WHERE dlq_topic = $1 AND record_key = 'a'`, e.dlqTopic).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 1<<31-1 {
		t.Fatalf("attempts = %d, want %d", attempts, 1<<31-1)
	}
}

// A record whose source topic no longer exists is skipped as unroutable;
// the redrive goes on with the other records.
func TestRedriveSkipsRecordsOfAMissingTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gone := testkit.Name(t, "gone")
	e.write(t, e.dlqTopic,
		spec{key: "a", value: "1", reason: "exception", srcTopic: gone, srcPartition: 0, failedAt: t0, redrives: -1},
		spec{key: "b", value: "2", reason: "exception", srcTopic: e.src, srcPartition: 1, failedAt: t0, redrives: -1},
		spec{key: "c", value: "3", reason: "exception", srcTopic: gone, srcPartition: 0, failedAt: t0, redrives: -1})
	for _, dry := range []bool{true, false} {
		var skipped []string
		res, err := dlq.Redrive(ctxT(t), e.opts, dlq.RedriveRequest{DLQTopic: e.dlqTopic, DryRun: dry, Each: func(r dlq.Record, d dlq.Decision) {
			if d == dlq.Unroutable {
				skipped = append(skipped, string(r.Key))
			}
		}})
		if err != nil {
			t.Fatalf("dry run %v: %v", dry, err)
		}
		if res.Sent != 1 || res.Unroutable != 2 || len(skipped) != 2 {
			t.Fatalf("dry run %v: %+v (unroutable %v), want 1 sent and a, c unroutable", dry, res, skipped)
		}
	}
	if got := e.k.ReadTopic(t, e.src); len(got) != 1 || string(got[0].Key) != "b" || got[0].Partition != 1 {
		t.Fatalf("source got %d records, want b in partition 1", len(got))
	}
}
