package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultArchiveGroup is the consumer group Archive and ArchiveOnce use when
// none is given.
const DefaultArchiveGroup = "dlq-archive"

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
	// before (same DLQ topic, partition and offset) is not inserted again.
	Inserted int
}

const insertArchive = `INSERT INTO dlq_archive (dlq_topic, dlq_partition, dlq_offset,
	source_topic, source_partition, source_offset, reason, rule_id, error_msg, stage,
	attempts, record_key, payload, payload_json, failed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14::text::jsonb, $15)
ON CONFLICT (dlq_topic, dlq_partition, dlq_offset) DO NOTHING`

// Archive consumes the DLQ topic as consumer group group (default
// DefaultArchiveGroup) and inserts every record into the dlq_archive table
// until ctx is done, then leaves the group and returns nil. Each polled
// batch is inserted in one transaction and its offsets are committed only
// after that transaction committed, so a crash re-delivers at most the
// uncommitted batch, and re-delivered records are ignored by the table's
// unique key (idempotent). A group new to the topic starts at its earliest
// record. Rebalances wait until the batch in hand is archived and committed.
// A database or Kafka error stops Archive and is returned.
func Archive(ctx context.Context, opts []kgo.Opt, db DB, topic, group string) error {
	a, err := newArchiver(opts, db, topic, group)
	if err != nil {
		return err
	}
	defer a.cl.Close()
	for {
		fs := a.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			a.cl.AllowRebalance()
			return nil
		}
		if err := a.handleFetches(ctx, fs); err != nil {
			if ctx.Err() != nil {
				return nil // uncommitted records are archived again, idempotently
			}
			return err
		}
	}
}

// ArchiveOnce archives the records of the DLQ topic that group has not
// committed yet, up to the end offsets captured when it is called, and
// returns the counts. It ends early when nothing arrives for a while (for
// example when another member of the group holds some partitions).
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

	a, err := newArchiver(opts, db, topic, group)
	if err != nil {
		return ArchiveResult{}, err
	}
	defer a.cl.Close()
	err = consumeUntil(ctx, a.cl, ends, pending, func(rs []*kgo.Record) error {
		return a.archive(ctx, rs)
	})
	if err != nil {
		return a.res, fmt.Errorf("dlq archive %s: %w", topic, err)
	}
	return a.res, nil
}

type archiver struct {
	cl    *kgo.Client
	db    DB
	topic string
	res   ArchiveResult
}

func newArchiver(opts []kgo.Opt, db DB, topic, group string) (*archiver, error) {
	if topic == "" {
		return nil, errors.New("dlq archive: no topic")
	}
	if group == "" {
		group = DefaultArchiveGroup
	}
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
		return nil, fmt.Errorf("dlq archive: kafka consumer: %w", err)
	}
	return &archiver{cl: cl, db: db, topic: topic}, nil
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
	if err := a.archive(ctx, fs.Records()); err != nil {
		return fmt.Errorf("dlq archive %s: %w", a.topic, err)
	}
	return nil
}

// archive inserts the data records of rs in one transaction, then commits
// the offsets of all of rs (control records included).
func (a *archiver) archive(ctx context.Context, rs []*kgo.Record) error {
	if len(rs) == 0 {
		return nil
	}
	var b pgx.Batch
	n := 0
	for _, kr := range rs {
		if kr.Attrs.IsControl() {
			continue
		}
		r, _ := Parse(kr) // tolerant: a malformed header leaves its column NULL or zero
		b.Queue(insertArchive, archiveArgs(r)...)
		n++
	}
	inserted := 0
	if n > 0 {
		err := pgx.BeginFunc(ctx, a.db, func(tx pgx.Tx) error {
			br := tx.SendBatch(ctx, &b)
			for range n {
				tag, err := br.Exec()
				if err != nil {
					_ = br.Close()
					return fmt.Errorf("insert into dlq_archive: %w", err)
				}
				inserted += int(tag.RowsAffected())
			}
			return br.Close()
		})
		if err != nil {
			return err
		}
	}
	if err := a.cl.CommitRecords(ctx, rs...); err != nil {
		return fmt.Errorf("commit offsets: %w", err)
	}
	a.res.Read += n
	a.res.Inserted += inserted
	return nil
}

// archiveArgs maps r to insertArchive's parameters; absent values are NULL.
func archiveArgs(r Record) []any {
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
		key, payload, asJSON, failedAt}
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
