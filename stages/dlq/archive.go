package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultArchiveGroup is the consumer group Archive and ArchiveOnce use when
// none is given.
const DefaultArchiveGroup = "dlq-archive"

// commitTimeout bounds the commit of an archived batch, which runs to its
// end even when the archiver's context is done.
const commitTimeout = 10 * time.Second

// DB is what the archiver needs from PostgreSQL; *pgxpool.Pool and
// *pgx.Conn satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ArchiveResult counts what an archive run did.
type ArchiveResult struct {
	// Read is how many DLQ records were consumed.
	Read int
	// Inserted is how many rows were new in dlq_archive; a record archived
	// before (same DLQ topic ID, topic name, partition and offset, or a row
	// archived before topic IDs were recorded with the same coordinates and
	// content) is not inserted again.
	Inserted int
}

// insertArchive inserts one DLQ record unless dlq_archive already holds it:
// a row with the same DLQ topic ID and coordinates (the unique key), or,
// when the record's topic ID is known, a row archived before topic IDs were
// recorded (zero ID) with the same coordinates and the same content. The
// content comparison tells a re-read of an old record (a new group, a crash
// before the offset commit) from a new record of a recreated topic at the
// same coordinates; every compared column is a deterministic function of
// the record (archiveArgs).
const insertArchive = `INSERT INTO dlq_archive (dlq_topic, dlq_partition, dlq_offset,
	source_topic, source_partition, source_offset, reason, rule_id, error_msg, stage,
	attempts, record_key, payload, payload_json, failed_at, dlq_topic_id)
SELECT $1::text, $2::int, $3::bigint, $4::text, $5::int, $6::bigint, $7::text, $8::text, $9::text,
	$10::text, $11::int, $12::text, $13::bytea, $14::text::jsonb, $15::timestamptz, $16::uuid
WHERE $16::uuid = '00000000-0000-0000-0000-000000000000' OR NOT EXISTS (
	SELECT 1 FROM dlq_archive o
	WHERE o.dlq_topic = $1 AND o.dlq_partition = $2 AND o.dlq_offset = $3
	  AND o.dlq_topic_id = '00000000-0000-0000-0000-000000000000'
	  AND o.source_topic IS NOT DISTINCT FROM $4 AND o.source_partition IS NOT DISTINCT FROM $5
	  AND o.source_offset IS NOT DISTINCT FROM $6 AND o.reason = $7 AND o.rule_id = $8
	  AND o.error_msg = $9 AND o.stage = $10 AND o.attempts = $11
	  AND o.record_key IS NOT DISTINCT FROM $12 AND o.payload = $13
	  AND o.failed_at IS NOT DISTINCT FROM $15)
ON CONFLICT (dlq_topic, dlq_partition, dlq_offset, dlq_topic_id) DO NOTHING`

// errTopicChanged reports that the DLQ topic's ID changed while records were
// read from a broker that does not name topic IDs in fetch responses, so the
// incarnation the records came from is unknown.
var errTopicChanged = errors.New("the topic was deleted and recreated during the run")

// Archive consumes the DLQ topic as consumer group group (default
// DefaultArchiveGroup) and inserts every record into the dlq_archive table
// until ctx is done, then leaves the group and returns nil. Each polled
// batch is inserted in one transaction and its offsets are committed only
// after that transaction committed, so a crash re-delivers at most the
// uncommitted batch, and re-delivered records are ignored by the table's
// unique key (idempotent). A group new to the topic starts at its earliest
// record. Rebalances wait until the batch in hand is archived and committed.
//
// Rows are keyed by the DLQ topic's Kafka topic ID as well as the record's
// partition and offset, so the records of a topic deleted and recreated
// under the same name are archived as new rows although their offsets
// start at 0 again. When Archive sees the topic recreated (UNKNOWN_TOPIC_ID)
// it drops the batch in hand, which belongs to the deleted topic, and
// consumes the new topic from the group's committed offsets (none, as the
// broker dropped them with the topic: its earliest record).
// Any other database or Kafka error stops Archive and is returned.
func Archive(ctx context.Context, opts []kgo.Opt, db DB, topic, group string) error {
	a, err := newArchiver(ctx, opts, db, topic, group)
	if err != nil {
		return err
	}
	defer a.close()
	for {
		fs := a.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			a.cl.AllowRebalance()
			return nil
		}
		err := a.handleFetches(ctx, fs)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil // uncommitted records are archived again, idempotently
		case errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, errTopicChanged):
			a.resubscribe(ctx)
		default:
			return err
		}
	}
}

// ArchiveOnce archives the records of the DLQ topic that group has not
// committed yet, up to the end offsets captured when it is called, and
// returns the counts. It ends early when nothing arrives for a while (for
// example when another member of the group holds some partitions). Rows are
// keyed as Archive describes; when the topic is deleted and recreated while
// ArchiveOnce runs it fails, and a new run archives the new topic.
func ArchiveOnce(ctx context.Context, opts []kgo.Opt, db DB, topic, group string) (ArchiveResult, error) {
	if group == "" {
		group = DefaultArchiveGroup
	}
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		return ArchiveResult{}, fmt.Errorf("dlq archive: kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	starts, ends, err := bounds(ctx, adm, topic)
	if err != nil {
		return ArchiveResult{}, fmt.Errorf("dlq archive: %w", err)
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topic)
	if errors.Is(err, kerr.GroupIDNotFound) {
		err = nil // a new group: nothing committed yet
	}
	if err != nil {
		return ArchiveResult{}, fmt.Errorf("dlq archive: offsets of group %q: %w", group, err)
	}
	pending := map[int32]struct{}{}
	for p, end := range ends {
		pos := starts[p]
		if c, ok := committed.Lookup(topic, p); ok && c.At > pos {
			pos = c.At
		}
		if pos < end {
			pending[p] = struct{}{}
		}
	}
	if len(pending) == 0 {
		return ArchiveResult{}, nil
	}

	a, err := newArchiver(ctx, opts, db, topic, group)
	if err != nil {
		return ArchiveResult{}, err
	}
	defer a.close()
	err = consumeUntil(ctx, a.cl, ends, pending, func(fs kgo.Fetches) error {
		return a.archive(ctx, fs)
	})
	if err != nil {
		return a.res, fmt.Errorf("dlq archive %s: %w", topic, err)
	}
	return a.res, nil
}

type archiver struct {
	cl    *kgo.Client // the group consumer
	meta  *kgo.Client // metadata requests, outside the consumer
	db    DB
	topic string
	res   ArchiveResult

	// metaID is the topic's ID from a metadata request made before the
	// consumer subscribed (metaOK false when it failed). It stands for
	// fetch responses that carry no topic ID, as long as a later request
	// still returns it.
	metaID [16]byte
	metaOK bool
}

func newArchiver(ctx context.Context, opts []kgo.Opt, db DB, topic, group string) (*archiver, error) {
	if topic == "" {
		return nil, errors.New("dlq archive: no topic")
	}
	if group == "" {
		group = DefaultArchiveGroup
	}
	meta, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("dlq archive: kafka client: %w", err)
	}
	a := &archiver{meta: meta, db: db, topic: topic}
	a.metaID, a.metaOK = a.lookupID(ctx) // before the consumer learns the topic
	cl, err := kgo.NewClient(append(opts[:len(opts):len(opts)],
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // committed past, so the group reaches the end offset
		kgo.FetchMaxWait(fetchMaxWait),
	)...)
	if err != nil {
		meta.Close()
		return nil, fmt.Errorf("dlq archive: kafka consumer: %w", err)
	}
	a.cl = cl
	return a, nil
}

func (a *archiver) close() {
	a.cl.Close()
	a.meta.Close()
}

// lookupID returns the topic's current ID with a metadata request that
// bypasses the client's metadata cache (which would return the ID of a
// deleted topic for a while). ok is false when the request failed or the
// topic does not exist; a broker without topic IDs returns the zero ID.
func (a *archiver) lookupID(ctx context.Context) (id [16]byte, ok bool) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(a.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, a.meta)
	if err != nil {
		return id, false
	}
	for _, t := range resp.Topics {
		if t.Topic != nil && *t.Topic == a.topic && t.ErrorCode == 0 {
			return t.TopicID, true
		}
	}
	return id, false
}

// resubscribe makes the consumer drop the deleted topic it holds and
// subscribe to the topic of the same name that exists now (kgo never
// adopts a recreated topic by itself). The topic ID is looked up before
// the consumer subscribes again, as newArchiver does.
func (a *archiver) resubscribe(ctx context.Context) {
	a.cl.PurgeTopicsFromClient(a.topic)
	a.metaID, a.metaOK = a.lookupID(ctx)
	a.cl.AddConsumeTopics(a.topic)
}

// fallbackID is the topic ID of records whose fetch response named none: the
// ID looked up before the consumer subscribed, provided the topic still has
// it. The consumer's records come from the topic it found when it
// subscribed, after that lookup; topic IDs are never reused, so the same ID
// before and after means the topic was not recreated in between.
func (a *archiver) fallbackID(ctx context.Context) ([16]byte, error) {
	id, ok := a.lookupID(ctx)
	if !ok || !a.metaOK || id != a.metaID {
		return [16]byte{}, fmt.Errorf("dlq archive: topic ID of %s: %w", a.topic, errTopicChanged)
	}
	return id, nil
}

// handleFetches archives one poll's records (Archive's loop).
func (a *archiver) handleFetches(ctx context.Context, fs kgo.Fetches) error {
	defer a.cl.AllowRebalance()
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		if ferr == nil {
			ferr = fmt.Errorf("dlq archive: fetch %s[%d]: %w", t, p, err)
		}
	})
	if ferr != nil {
		return ferr
	}
	if err := a.archive(ctx, fs); err != nil {
		return fmt.Errorf("dlq archive %s: %w", a.topic, err)
	}
	return nil
}

// archive inserts the data records of fs in one transaction, each under the
// topic ID its fetch response names (fallbackID when it names none), then
// commits the offsets of all of fs's records (control records included).
// A record whose value PostgreSQL refuses as jsonb is archived with
// payload_json NULL (insertRows).
func (a *archiver) archive(ctx context.Context, fs kgo.Fetches) error {
	all := fs.Records()
	if len(all) == 0 {
		return nil
	}
	ids := map[string][16]byte{}
	fs.EachTopic(func(ft kgo.FetchTopic) { ids[ft.Topic] = ft.TopicID })
	var (
		rows     [][]any
		fallback *[16]byte // fallbackID, once asked
	)
	for _, kr := range all {
		if kr.Attrs.IsControl() {
			continue
		}
		id := ids[kr.Topic]
		if id == [16]byte{} {
			if fallback == nil {
				fid, err := a.fallbackID(ctx)
				if err != nil {
					return err
				}
				fallback = &fid
			}
			id = *fallback
		}
		r, _ := Parse(kr) // tolerant: a malformed header leaves its column NULL or zero
		rows = append(rows, archiveArgs(r, id))
	}
	inserted, err := a.insertRows(ctx, rows)
	if err != nil {
		return err
	}
	// Commit what was inserted even when ctx ended meanwhile (a shutdown
	// between the insert and the commit): otherwise the next run reads
	// those records again (harmless, the insert is idempotent, but work).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	if err := a.cl.CommitRecords(cctx, all...); err != nil {
		return fmt.Errorf("commit offsets: %w", err)
	}
	a.res.Read += len(rows)
	a.res.Inserted += inserted
	return nil
}

// insertRows inserts rows (insertArchive's arguments) in one transaction and
// returns how many were new. Go's json.Valid (jsonColumnOK) accepts values
// that jsonb refuses with a data exception (SQLSTATE class 22): a lone
// surrogate escape, a number beyond numeric's range. Such a value fails the
// whole batch, so on a data exception the rows are inserted again in a new
// transaction by insertRowsGuarded, where a row whose payload_json cast
// fails is stored with payload_json NULL (payload keeps its bytes). Any
// other error, and a data exception that NULL payload_json does not cure,
// is returned and nothing is inserted.
func (a *archiver) insertRows(ctx context.Context, rows [][]any) (int, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	var inserted int
	err := pgx.BeginFunc(ctx, a.db, func(tx pgx.Tx) error {
		inserted = 0
		var b pgx.Batch
		for _, args := range rows {
			b.Queue(insertArchive, args...)
		}
		br := tx.SendBatch(ctx, &b)
		for range rows {
			tag, err := br.Exec()
			if err != nil {
				_ = br.Close()
				return fmt.Errorf("insert into dlq_archive: %w", err)
			}
			inserted += int(tag.RowsAffected())
		}
		return br.Close()
	})
	if err == nil || !isDataException(err) {
		return inserted, err
	}
	err = pgx.BeginFunc(ctx, a.db, func(tx pgx.Tx) error {
		var err error
		inserted, err = insertRowsGuarded(ctx, tx, rows)
		return err
	})
	return inserted, err
}

// rowSavepoint guards the insert of one row whose payload_json is set.
const rowSavepoint = "dlq_archive_row"

// insertRowsGuarded inserts rows in tx, each row with a payload_json under
// a savepoint. When such a row fails with a data exception, the savepoint
// is rolled back and the row is inserted with payload_json NULL; the rows
// after it are sent again. The statements go in pipelined batches: one
// batch for the rows, then three round trips per refused value.
func insertRowsGuarded(ctx context.Context, tx pgx.Tx, rows [][]any) (int, error) {
	inserted := 0
	for next := 0; next < len(rows); {
		type step struct {
			row    int
			insert bool
		}
		var (
			b     pgx.Batch
			steps []step
		)
		for i := next; i < len(rows); i++ {
			guarded := hasJSON(rows[i])
			if guarded {
				b.Queue("SAVEPOINT " + rowSavepoint)
				steps = append(steps, step{row: i})
			}
			b.Queue(insertArchive, rows[i]...)
			steps = append(steps, step{row: i, insert: true})
			if guarded {
				b.Queue("RELEASE SAVEPOINT " + rowSavepoint)
				steps = append(steps, step{row: i})
			}
		}
		br := tx.SendBatch(ctx, &b)
		refused := -1
		for _, st := range steps {
			tag, err := br.Exec()
			if err == nil {
				if st.insert {
					inserted += int(tag.RowsAffected())
				}
				continue
			}
			_ = br.Close()
			if st.insert && hasJSON(rows[st.row]) && isDataException(err) {
				refused = st.row
				break
			}
			return 0, fmt.Errorf("insert into dlq_archive: %w", err)
		}
		if refused < 0 {
			if err := br.Close(); err != nil {
				return 0, fmt.Errorf("insert into dlq_archive: %w", err)
			}
			return inserted, nil
		}
		// The server skipped the statements after the refused row; the
		// transaction is usable again once the row's savepoint is rolled
		// back (a statement without arguments, sent as a simple query: an
		// aborted transaction refuses the prepare of a batch).
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+rowSavepoint); err != nil {
			return 0, fmt.Errorf("roll back the refused dlq_archive row: %w", err)
		}
		args := slices.Clone(rows[refused])
		args[jsonArg] = (*string)(nil)
		b = pgx.Batch{}
		b.Queue(insertArchive, args...)
		b.Queue("RELEASE SAVEPOINT " + rowSavepoint)
		br = tx.SendBatch(ctx, &b)
		tag, err := br.Exec()
		if err == nil {
			inserted += int(tag.RowsAffected())
			_, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, fmt.Errorf("insert into dlq_archive with payload_json NULL: %w", err)
		}
		next = refused + 1
	}
	return inserted, nil
}

// hasJSON reports whether args (archiveArgs' result) set payload_json.
func hasJSON(args []any) bool {
	s, _ := args[jsonArg].(*string)
	return s != nil
}

// isDataException reports whether err is a PostgreSQL data exception
// (SQLSTATE class 22): a value the statement's types refuse.
func isDataException(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22")
}

// jsonArg is the index of payload_json in archiveArgs' result.
const jsonArg = 13

// archiveArgs maps r, read from the DLQ topic whose ID is topicID, to
// insertArchive's parameters; absent values are NULL. payload_json (at
// jsonArg) is the value when jsonColumnOK accepts it, a *string.
func archiveArgs(r Record, topicID [16]byte) []any {
	var (
		srcTopic    *string
		srcPart     *int32
		srcOffset   *int64
		key, asJSON *string
		failedAt    *time.Time
	)
	if r.SourceTopic != "" {
		s := pgText(r.SourceTopic)
		srcTopic = &s
	}
	if r.SourcePartition >= 0 {
		srcPart = &r.SourcePartition
	}
	if r.SourceOffset >= 0 {
		srcOffset = &r.SourceOffset
	}
	if r.Key != nil {
		s := pgText(string(r.Key))
		key = &s
	}
	if jsonColumnOK(r.Value) {
		s := string(r.Value)
		asJSON = &s
	}
	if !r.FailedAt.IsZero() {
		failedAt = &r.FailedAt
	}
	payload := r.Value
	if payload == nil {
		payload = []byte{}
	}
	// The attempts column is an INT: a larger count (a hand-written or
	// corrupt header) would fail the insert on every run and stop the
	// archiver, so it is stored as the largest value the column holds.
	attempts := min(r.Attempts, math.MaxInt32)
	return []any{r.Topic, r.Partition, r.Offset, srcTopic, srcPart, srcOffset,
		pgText(r.Reason), pgText(r.Rule), pgText(r.Error), pgText(r.Stage), attempts,
		key, payload, asJSON, failedAt, pgtype.UUID{Bytes: topicID, Valid: true}}
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
