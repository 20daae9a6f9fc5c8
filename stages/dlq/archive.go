package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// DefaultArchiveGroup is the consumer group Archive and ArchiveOnce use when
// none is given.
const DefaultArchiveGroup = "dlq-archive"

// DB is what the archiver needs from PostgreSQL. The partitions of the DLQ
// topic are archived concurrently, so it must be safe for concurrent use:
// a *pgxpool.Pool, not a *pgx.Conn.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ArchiveResult counts what an archive run did.
type ArchiveResult struct {
	// Read is how many DLQ records were consumed and written.
	Read int
	// Inserted is how many rows were new in dlq_archive; a record archived
	// before (same DLQ topic ID, topic name, partition and offset, or a row
	// archived before topic IDs were recorded with the same coordinates and
	// content) is not inserted again.
	Inserted int
}

// ArchiveOption configures Archive and ArchiveOnce.
type ArchiveOption func(*archiveOptions)

type archiveOptions struct{ log *slog.Logger }

// ArchiveLogger sets the logger of the archiver's runtime (default
// slog.Default()).
func ArchiveLogger(l *slog.Logger) ArchiveOption { return func(o *archiveOptions) { o.log = l } }

// errTopicChanged reports that the DLQ topic was deleted (and perhaps
// recreated) since the archiver looked up its topic ID, so the incarnation
// the records in hand came from is unknown.
var errTopicChanged = errors.New("the topic was deleted or recreated during the run")

// Archive consumes the DLQ topic as consumer group group (default
// DefaultArchiveGroup) with read_committed isolation and inserts every
// record into the dlq_archive table until ctx is done, then leaves the
// group and returns nil. It runs on the runtime (package stages/run): each
// batch is written in one transaction and its offsets are committed after
// that (commits move past transaction markers too), so a crash re-delivers
// at most the uncommitted batches, which the table's unique key ignores
// (idempotent). A group new to the topic starts at its earliest record.
// Database failures are retried with the runtime's backoff until they pass.
//
// Rows are keyed by the DLQ topic's Kafka topic ID as well as the record's
// partition and offset, so the records of a topic deleted and recreated
// under the same name are archived as new rows although their offsets
// start at 0 again. When Archive sees the topic deleted or recreated it
// drops the batches in hand, which belong to the deleted topic, and starts
// over on the new topic (waiting for it when it was only deleted), from
// the group's committed offsets: none, as the broker dropped them with the
// topic, so from its earliest record. Any other fatal error stops Archive
// and is returned: a record that cannot be archived, which is never skipped
// (the topic it would be dead-lettered to is the one being archived).
func Archive(ctx context.Context, opts []kgo.Opt, db DB, topic, group string, aopts ...ArchiveOption) error {
	for {
		a, err := newArchiver(ctx, opts, db, topic, group, aopts)
		if err != nil {
			return err
		}
		_, err = a.run(ctx, false)
		changed := err != nil && ctx.Err() == nil && a.changed(ctx, err)
		a.close()
		switch {
		case ctx.Err() != nil:
			return nil // uncommitted records are archived again, idempotently
		case !changed:
			return err
		}
		a.log.Warn("the DLQ topic was deleted or recreated; archiving its new incarnation", "topic", topic, "err", err)
		t := time.NewTimer(time.Second) // not a hot loop while the topic is missing
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// ArchiveOnce archives the records of the DLQ topic that group has not
// committed yet, up to the end offsets (last stable offsets) listed when it
// is called, and returns the counts (nothing pending: it returns at once
// without joining the group). It ends early when nothing arrives for
// idleTimeout while every record read is archived (another member of the
// group holds some partitions, say). Rows are keyed as Archive describes;
// when the topic is deleted and recreated while ArchiveOnce runs it fails,
// and a new run archives the new topic. A database error ends it too (with
// the records read before archived and committed); a record that cannot be
// archived fails it, uncommitted.
func ArchiveOnce(ctx context.Context, opts []kgo.Opt, db DB, topic, group string, aopts ...ArchiveOption) (ArchiveResult, error) {
	a, err := newArchiver(ctx, opts, db, topic, group, aopts)
	if err != nil {
		return ArchiveResult{}, err
	}
	defer a.close()
	res, err := a.run(ctx, true)
	if err != nil {
		return res, fmt.Errorf("dlq archive %s: %w", topic, err)
	}
	return res, nil
}

// archiver is one run of the runtime over the DLQ topic: decodeRaw →
// archiveStage → write (a pgsink table).
type archiver struct {
	meta  *kgo.Client // metadata requests (lookupID)
	opts  []kgo.Opt
	topic string
	group string
	sink  *pgsink.Sink[archiveRow]
	log   *slog.Logger
	once  bool // ArchiveOnce: database errors are fatal

	// id is the topic's ID from a metadata request made before the
	// runner subscribed (idOK false when the topic was not found); see write.
	id   [16]byte
	idOK bool

	read, inserted atomic.Int64
}

func newArchiver(ctx context.Context, opts []kgo.Opt, db DB, topic, group string, aopts []ArchiveOption) (*archiver, error) {
	if topic == "" {
		return nil, errors.New("dlq archive: no topic")
	}
	if group == "" {
		group = DefaultArchiveGroup
	}
	o := archiveOptions{log: slog.Default()}
	for _, opt := range aopts {
		opt(&o)
	}
	sink, err := pgsink.New(db, archiveTable())
	if err != nil {
		return nil, fmt.Errorf("dlq archive: %w", err)
	}
	meta, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("dlq archive: kafka client: %w", err)
	}
	a := &archiver{meta: meta, opts: opts, topic: topic, group: group, sink: sink, log: o.log}
	a.id, a.idOK, _ = a.lookupID(ctx) // before the runner's consumer learns the topic
	return a, nil
}

func (a *archiver) close() { a.meta.Close() }

// run archives with the runtime until ctx is done, or, once set, until
// the group's backlog is archived (Config.StopAtEnd).
func (a *archiver) run(ctx context.Context, once bool) (ArchiveResult, error) {
	a.once = once
	cfg := run.Config{Name: "dlq-archive", Group: a.group, Topics: []string{a.topic}, NoDLQ: true, StopAtEnd: once, StopIdle: idleTimeout}
	kopts := append(a.opts[:len(a.opts):len(a.opts)], kgo.FetchMaxWait(fetchMaxWait),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()) // committed past, so the group reaches the end offset
	r, err := run.New(cfg, decodeRaw, archiveStage, stages.SinkFunc[archiveRow](a.write), run.WithKafkaOpts(kopts...), run.WithLogger(a.log))
	if err != nil {
		return ArchiveResult{}, fmt.Errorf("dlq archive: %w", err)
	}
	err = r.Run(ctx)
	return ArchiveResult{Read: int(a.read.Load()), Inserted: int(a.inserted.Load())}, err
}

// write is the runtime's sink: it stamps rows with the topic ID (see
// topicID) and writes them. A record PostgreSQL refuses even with
// payload_json NULL (see archiveTable) is rejected, which the runtime
// (NoDLQ) turns into a fatal error. In a one-shot run any other error is
// fatal too; otherwise the runtime retries it.
func (a *archiver) write(ctx context.Context, rows []archiveRow) error {
	id, err := a.topicID(ctx)
	if err == nil {
		for i := range rows {
			rows[i].topicID = id
		}
		var n int64
		n, err = a.sink.WriteCount(ctx, rows)
		a.inserted.Add(n)
	}
	var rej *stages.Rejections
	switch {
	case err == nil:
		a.read.Add(int64(len(rows)))
		return nil
	case errors.As(err, &rej) || ctx.Err() != nil:
		return err
	case a.once || errors.Is(err, errTopicChanged):
		return stages.Fatal(err)
	}
	return err
}

// topicID returns the ID of the topic incarnation the records of a batch
// come from: the ID looked up before the runner subscribed, provided the
// topic still has it now. The runner's consumer reads the incarnation it
// found when it subscribed, after that lookup, and the batch was fetched
// before this call; topic IDs are never reused, so the same ID before and
// after means that every record fetched in between is of that incarnation.
// Otherwise it returns errTopicChanged. A broker without topic IDs gives
// the zero ID, which rows then carry.
func (a *archiver) topicID(ctx context.Context) ([16]byte, error) {
	id, ok, err := a.lookupID(ctx)
	switch {
	case err != nil:
		return id, fmt.Errorf("topic ID of %s: %w", a.topic, err)
	case !ok || !a.idOK || id != a.id:
		return id, fmt.Errorf("topic ID of %s: %w", a.topic, errTopicChanged)
	}
	return id, nil
}

// changed reports whether err, which ended a run, came with the topic
// deleted or recreated: errTopicChanged, or the topic no longer has the ID
// the run started with (the runtime stops when it sees that itself).
func (a *archiver) changed(ctx context.Context, err error) bool {
	if errors.Is(err, errTopicChanged) {
		return true
	}
	id, ok, lerr := a.lookupID(ctx)
	return lerr == nil && (!ok || !a.idOK || id != a.id)
}

// lookupID returns the topic's current ID with a metadata request that
// bypasses the client's metadata cache (which would return the ID of a
// deleted topic for a while); ok is false when the topic does not exist.
// A broker without topic IDs returns the zero ID.
func (a *archiver) lookupID(ctx context.Context) (id [16]byte, ok bool, err error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(a.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, a.meta)
	if err != nil {
		return id, false, err
	}
	for _, t := range resp.Topics {
		if t.Topic != nil && *t.Topic == a.topic && t.ErrorCode == 0 {
			return t.TopicID, true, nil
		}
	}
	return id, false, nil
}

// rawRecord is a DLQ record's key and value as the runtime decodes them:
// unchanged, a nil key kept apart from an empty one (record_key NULL).
type rawRecord struct{ key, value []byte }

func decodeRaw(key, value []byte) (rawRecord, error) { return rawRecord{key, value}, nil }

// archiveStage maps a DLQ record to its dlq_archive row; it never fails (a
// malformed header leaves its column NULL or zero, see Parse).
func archiveStage(_ context.Context, m stages.Msg[rawRecord]) ([]archiveRow, error) {
	kr := &kgo.Record{Topic: m.Source.Topic, Partition: m.Source.Partition, Offset: m.Source.Offset,
		Timestamp: m.Source.Timestamp, Key: m.Value.key, Value: m.Value.value}
	for _, h := range m.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	r, _ := Parse(kr)
	return []archiveRow{newArchiveRow(r)}, nil
}

// archiveRow is one dlq_archive row; nil pointers are NULL.
type archiveRow struct {
	topic                       string
	partition                   int32
	offset                      int64
	srcTopic                    *string
	srcPartition                *int32
	srcOffset                   *int64
	reason, rule, errMsg, stage string
	attempts                    int
	key                         *string
	payload                     []byte
	json                        *string // payload_json
	failedAt                    *time.Time
	redrives                    int32    // redrive_count
	topicID                     [16]byte // set by archiver.write
}

// newArchiveRow maps r to its row (without the topic ID); absent values
// are NULL. payload_json is the value when jsonColumnOK accepts it.
func newArchiveRow(r Record) archiveRow {
	row := archiveRow{topic: r.Topic, partition: r.Partition, offset: r.Offset,
		reason: pgText(r.Reason), rule: pgText(r.Rule), errMsg: pgText(r.Error), stage: pgText(r.Stage),
		// The attempts column is an INT: a larger count (a hand-written or
		// corrupt header) would fail the insert on every run and stop the
		// archiver, so it is stored as the largest value the column holds.
		attempts: min(r.Attempts, math.MaxInt32),
		redrives: int32(min(r.RedriveCount, math.MaxInt32)),
		payload:  r.Value,
	}
	if r.SourceTopic != "" {
		s := pgText(r.SourceTopic)
		row.srcTopic = &s
	}
	if r.SourcePartition >= 0 {
		row.srcPartition = &r.SourcePartition
	}
	if r.SourceOffset >= 0 {
		row.srcOffset = &r.SourceOffset
	}
	if r.Key != nil {
		s := pgText(string(r.Key))
		row.key = &s
	}
	if jsonColumnOK(r.Value) {
		s := string(r.Value)
		row.json = &s
	}
	if !r.FailedAt.IsZero() {
		row.failedAt = &r.FailedAt
	}
	if row.payload == nil {
		row.payload = []byte{}
	}
	return row
}

// zeroID is the dlq_topic_id of rows archived before topic IDs were
// recorded, and of rows read from brokers without topic IDs.
const zeroID = "'00000000-0000-0000-0000-000000000000'"

// notArchivedBefore is the Where of archiveTable: a row with a topic ID is
// not inserted when dlq_archive holds its record from before topic IDs were
// recorded: a row with the zero ID, the same coordinates and the same
// content. The content comparison tells a re-read of an old record (a new
// group, a crash before the offset commit) from a new record of a recreated
// topic at the same coordinates; every compared column is a deterministic
// function of the record (newArchiveRow).
const notArchivedBefore = `s.dlq_topic_id = ` + zeroID + ` OR NOT EXISTS (
	SELECT 1 FROM dlq_archive o
	WHERE o.dlq_topic = s.dlq_topic AND o.dlq_partition = s.dlq_partition AND o.dlq_offset = s.dlq_offset
	  AND o.dlq_topic_id = ` + zeroID + `
	  AND o.source_topic IS NOT DISTINCT FROM s.source_topic AND o.source_partition IS NOT DISTINCT FROM s.source_partition
	  AND o.source_offset IS NOT DISTINCT FROM s.source_offset AND o.reason = s.reason AND o.rule_id = s.rule_id
	  AND o.error_msg = s.error_msg AND o.stage = s.stage AND o.attempts = s.attempts
	  AND o.record_key IS NOT DISTINCT FROM s.record_key AND o.payload = s.payload
	  AND o.failed_at IS NOT DISTINCT FROM s.failed_at)`

// archiveTable is dlq_archive as the sink writes it: one row per DLQ record
// (topic, topic ID, partition, offset: the unique key), inserted unless
// it is there (DO NOTHING) or was archived before topic IDs were recorded
// (notArchivedBefore). Go's json.Valid (jsonColumnOK) accepts values that
// jsonb refuses with a data exception (SQLSTATE class 22): a lone surrogate
// escape, a number beyond numeric's range; such a row is written again
// with payload_json NULL (payload keeps its bytes) by the sink's Fallback,
// so it holds back neither its batch nor its partition.
func archiveTable() pgsink.Table[archiveRow] {
	return pgsink.Table[archiveRow]{
		Name: "dlq_archive",
		Columns: []string{"dlq_topic", "dlq_partition", "dlq_offset", "source_topic", "source_partition", "source_offset",
			"reason", "rule_id", "error_msg", "stage", "attempts", "record_key", "payload", "payload_json", "failed_at", "dlq_topic_id", "redrive_count"},
		Key: []string{"dlq_topic", "dlq_partition", "dlq_offset", "dlq_topic_id"},
		KeyOf: func(r archiveRow) string {
			return fmt.Sprintf("%s\x00%d\x00%d\x00%x", r.topic, r.partition, r.offset, r.topicID)
		},
		Values: func(r archiveRow) []any {
			return []any{r.topic, r.partition, r.offset, r.srcTopic, r.srcPartition, r.srcOffset,
				r.reason, r.rule, r.errMsg, r.stage, r.attempts, r.key, r.payload, r.json, r.failedAt,
				pgtype.UUID{Bytes: r.topicID, Valid: true}, r.redrives}
		},
		// A second copy of a source record's dead letter in the same DLQ
		// topic incarnation (same source coordinates and redrive count,
		// another DLQ offset) is skipped on the unique index
		// dlq_archive_source_record_key.
		AnyConflict: true,
		Where:       notArchivedBefore,
		Fallback: func(r archiveRow, refusal error) (archiveRow, bool) {
			if r.json == nil || !strings.HasPrefix(pgsink.SQLState(refusal), "22") {
				return r, false
			}
			r.json = nil
			return r, true
		},
	}
}

// jsonColumnOK reports whether v can be stored in a jsonb column: valid
// UTF-8 JSON without the \u0000 escape, which PostgreSQL rejects.
func jsonColumnOK(v []byte) bool {
	return len(v) > 0 && utf8.Valid(v) && json.Valid(v) && !strings.Contains(string(v), `\u0000`)
}

// pgText makes s storable in a text column: valid UTF-8 without NUL bytes.
func pgText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}
