// Package pgsink is a PostgreSQL upsert sink built for throughput. One
// Write sorts the batch by natural key, folds the items of a repeated key
// into one row with [Table.Merge] (a batch of distinct keys, such as a
// coalescing window's output that the runtime already merged, is not
// merged again) and applies the rows in one transaction, in one of three
// ways:
//
//   - values: a batch of at most [DefaultSmallBatch] rows (see
//     [WithSmallBatch]) is sent as one INSERT … VALUES … ON CONFLICT
//     statement with bind parameters, the upsert below with the rows in
//     place of the staging table: one round trip, no staging table, no
//     lookup;
//   - upsert: the rows are COPYed into a temporary staging table and
//     applied with a single INSERT … SELECT … ON CONFLICT … DO UPDATE (see
//     [Sink.UpsertSQL]);
//   - direct: when at least 3/4 of the keys are new, the rows of the new
//     keys are COPYed straight into the table — cheaper for PostgreSQL
//     than the upsert: no staging table, no speculative insertion — and
//     only the rows of existing keys are upserted.
//
// To choose between the COPY ways, the sink looks the keys up in the
// table (an index probe per key, so it needs SELECT on the key columns);
// in a batch of more than 128 keys it first looks up an evenly spaced
// sample of 64 and upserts the whole batch when fewer than 3/4 of those
// are new, so that batches of mostly existing keys do not pay for the
// full lookup. If the direct COPY hits a unique violation — a key the
// lookup did not see was inserted meanwhile by another writer, or a row
// breaks another unique index — the transaction is rolled back and its
// rows upserted in a new one, so a concurrent insert never loses or
// rejects a row.
//
// Whichever way, the outcome is that of the upsert: a new key is inserted
// (with the table's defaults for the columns not written), an existing one
// updated by the Update clause.
//
// It implements [stages.Sink]:
//
//   - Idempotent: the upsert is keyed by the table's conflict key, and an
//     update that would change none of the Update columns is skipped, so a
//     redelivered batch leaves the rows untouched (Touch columns included).
//   - A row the database refuses permanently (see [IsPermanent]) does not
//     hold back the rest of the batch: the batch is bisected — halves are
//     retried in their own transactions, recursing into the failing half —
//     until the culprit rows are isolated; every other row lands and the
//     culprits are reported in a [*stages.Rejections] with indexes into the
//     caller's batch, unless [Table.Fallback] offers a row to write in a
//     culprit's place. With k bad rows among n the cost is about
//     k·log2(n) extra transactions.
//   - When several items of one key were merged and the merged row is
//     refused, the items of that key are written again one at a time, in
//     batch order, each in its own transaction: every item lands as it would
//     have in a batch of its own and only the items the database refuses are
//     rejected (a valid item is never dead-lettered for a later item of its
//     key). This costs one transaction per item of the refused key. An item
//     that a later item of its key supersedes in the merged row is not
//     checked on its own: when the merged row lands, every item of the key
//     counts as written.
//   - Any other error (transient ones, see [IsTransient], but also schema
//     errors such as an undefined table) is returned as an ordinary error:
//     the runtime retries the whole batch. Halves that landed before such an
//     error are written again by the retry, which the upsert makes harmless.
//
// With [WithOffsets] a Write is a single transaction that also stores the
// batch's consumer offset, the halves of the bisection and the other
// retries above being savepoints of it: exactly-once effects for tables
// whose Update is not idempotent (see [WithOffsets]).
//
// A Sink is safe for concurrent use. Every writer handles its rows in the
// byte order of their KeyOf strings (the staging table is read in the order
// it was filled; the upsert has no ORDER BY, which would cost a sort that
// spills to disk for large batches), so concurrent writers to one table
// take their row locks and wait on each other's new keys in the same order,
// which avoids most lock-order deadlocks. A direct write that also upserts
// goes through its keys in two ordered passes (existing keys, then new
// ones), so it can still deadlock with a concurrent writer of the same
// keys; a deadlock is transient and the batch retried.
package pgsink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/stages"
)

// Set is one assignment of an ON CONFLICT … DO UPDATE SET clause:
// Column = Expr. Expr refers to the stored row as t (the target's alias)
// and to the incoming row as EXCLUDED, e.g.
// Set{"first_seen_time", "LEAST(t.first_seen_time, EXCLUDED.first_seen_time)"}.
type Set struct {
	Column string
	Expr   string
}

// Table describes how rows of type T are upserted into one table.
type Table[T any] struct {
	// Name is the target table, optionally schema-qualified ("s.t"). An
	// unqualified name resolves through the connection's search_path.
	Name string
	// Columns are the columns written, in the order Values returns them.
	// Columns not listed take their defaults on insert.
	Columns []string
	// Key are the conflict target columns (a unique index); they must be in
	// Columns.
	Key []string
	// Update is the DO UPDATE SET clause. Empty means DO NOTHING.
	Update []Set
	// AnyConflict, with an empty Update, skips a row that conflicts with
	// any unique index or constraint of the table (ON CONFLICT DO NOTHING
	// without a target), not only with Key's: for a table with a second
	// unique key that incoming rows may repeat. Rows of one Write that
	// conflict with each other are skipped after the first too. It has no
	// effect with Update.
	AnyConflict bool
	// Touch are columns set to now() whenever a conflicting row is updated
	// (e.g. ingest_time).
	Touch []string
	// UpdateUnchanged, when true, updates a conflicting row even when no
	// Update column changes (Touch columns then move on every redelivery).
	// By default such no-op updates are skipped.
	UpdateUnchanged bool
	// KeyOf returns the natural key of a row as one string; items with the
	// same key in one batch are merged before the statement. Keys the
	// conflict key's index holds equal must give the same string (upper-case
	// a citext column, say): two items of one row under different strings
	// make the upsert fail ("cannot affect row a second time"), which is
	// not a row error, so the batch would be retried as a whole.
	KeyOf func(T) string
	// Merge combines an earlier item (old) with a later one (next) of the
	// same key exactly as the Update clause would; nil means the later item
	// wins. It is called only for the second and later items of a key in
	// one Write, in batch order.
	Merge func(old, next T) T
	// Values returns a row's column values in Columns order (nil = NULL),
	// as pgx encodes them for COPY; the values of the Key columns are also
	// sent as elements of arrays of the columns' types (the lookup of
	// existing keys). It is called once per merged row.
	Values func(T) []any
	// AppendCopy, when set, appends a row's columns in Columns order in
	// the binary format of COPY (see [AppendText] and the other Append
	// functions, which encode as pgx does): the rows are then sent with
	// COPY … (FORMAT binary), each encoded once, and Values is called only
	// for the Key columns' values, when KeyValues is nil. Each column must
	// be in its type's binary format exactly: the server refuses a
	// mismatch (SQLSTATE 22P03) and the rows are rejected. It must not
	// retain dst.
	AppendCopy func(dst []byte, row T) []byte
	// KeyValues, when set, returns the values of a row's Key columns, in
	// Key order, as Values would (the lookup of existing keys sends them);
	// it spares a table with AppendCopy the boxing of all its values.
	KeyValues func(T) []any
	// Where, when set, is an SQL condition on an incoming row that decides
	// whether the row is written at all: a row for which it is not true is
	// neither inserted nor updated (nor rejected). It names the incoming
	// row's columns s.<column> and may query other tables, e.g.
	// NOT EXISTS (SELECT 1 FROM t2 WHERE t2.k = s.k). With Where every row
	// goes through the staging table (no direct COPY of new keys, see the
	// package documentation), so that the condition applies to all.
	Where string
	// Fallback, when set, is offered each item the database refused
	// permanently (see [IsPermanent]), once the bisection isolated it, with
	// the refusal. When it returns ok, the row it returns (of the same key)
	// is written in its place, in a transaction of its own, and the item
	// counts as written if that row lands; it is rejected, with the second
	// refusal, otherwise. Fallback is for a value the database may refuse
	// that can be stored another way: a jsonb copy of a document that jsonb
	// does not accept left NULL, say. nil rejects refused items at once.
	Fallback func(row T, refusal error) (T, bool)
}

// Beginner starts transactions; *pgxpool.Pool implements it (a *pgx.Conn
// does too but is not safe for concurrent use).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Option configures [New].
type Option func(*options)

type options struct {
	reg      prometheus.Registerer
	pipeline string
	log      *slog.Logger
	offsets  bool
	small    int
}

// WithRegisterer registers the sink's metrics (sluice_pgsink_*) on reg with
// the const labels pipeline=pipeline and table=<Table.Name>. Several sinks
// may share one registry; two sinks with the same pipeline and table share
// their series.
func WithRegisterer(reg prometheus.Registerer, pipeline string) Option {
	return func(o *options) { o.reg, o.pipeline = reg, pipeline }
}

// WithLogger sets the logger for rejections and bisection (default: none).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// stagingTable is the name of the per-transaction staging table (it lives
// in the session's pg_temp schema and is dropped at commit).
const stagingTable = "_pgsink_staging"

// Sink upserts batches of T into one table. Build it with [New].
type Sink[T any] struct {
	db        Beginner
	table     Table[T]
	columns   map[string]bool
	createSQL string
	upsertSQL string
	m         *metrics
	log       *slog.Logger

	target pgx.Identifier
	keyPos []int // positions of the Key columns in Columns

	// offsets: WithOffsets (offsets.go).
	offsets   bool
	offsetsMu sync.Mutex
	offsetsOK bool // the offsets table exists

	// upsertOnly sends every row through the staging table (benchmarks
	// compare it with the default).
	upsertOnly bool

	// small batches: WithSmallBatch (values.go).
	smallRows int
	colMu     sync.Mutex
	cols      *columns // nil until read

	probeMu   sync.Mutex
	probeSQL  string     // built on first use from the key columns' types
	textTypes []textType // key column types pgx may not know (see registerTextTypes)
}

var _ stages.Sink[int] = (*Sink[int])(nil)

// New returns a sink for table. It checks the description but does not
// touch the database.
func New[T any](db Beginner, table Table[T], opts ...Option) (*Sink[T], error) {
	if db == nil {
		return nil, errors.New("pgsink: nil database")
	}
	if err := table.check(); err != nil {
		return nil, err
	}
	o := options{log: slog.New(slog.DiscardHandler), small: DefaultSmallBatch}
	for _, opt := range opts {
		opt(&o)
	}
	var reg prometheus.Registerer
	if o.reg != nil {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": o.pipeline, "table": table.Name}, o.reg)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("pgsink: register metrics: %w", err)
	}
	s := &Sink[T]{
		db:        db,
		table:     table,
		columns:   make(map[string]bool, len(table.Columns)),
		m:         m,
		log:       o.log.With("table", table.Name),
		target:    pgx.Identifier(strings.Split(table.Name, ".")),
		offsets:   o.offsets,
		smallRows: max(o.small, 0),
	}
	for _, c := range table.Columns {
		s.columns[c] = true
	}
	for _, k := range table.Key {
		s.keyPos = append(s.keyPos, slices.Index(table.Columns, k))
	}
	s.createSQL = table.createSQL()
	s.upsertSQL = table.upsertFrom(pgx.Identifier{stagingTable}.Sanitize(), false)
	s.upsertOnly = table.Where != "" // the direct COPY cannot apply Where
	return s, nil
}

func (t Table[T]) check() error {
	switch {
	case t.Name == "":
		return errors.New("pgsink: table name is empty")
	case len(t.Columns) == 0:
		return fmt.Errorf("pgsink: table %s: no columns", t.Name)
	case len(t.Key) == 0:
		return fmt.Errorf("pgsink: table %s: no conflict key", t.Name)
	case t.KeyOf == nil || t.Values == nil:
		return fmt.Errorf("pgsink: table %s: KeyOf and Values are required", t.Name)
	}
	for _, k := range t.Key {
		if !slices.Contains(t.Columns, k) {
			return fmt.Errorf("pgsink: table %s: key column %q is not written", t.Name, k)
		}
	}
	return nil
}

func ident(name string) string {
	return pgx.Identifier(strings.Split(name, ".")).Sanitize()
}

func identList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(q, ", ")
}

// createSQL is the staging table's DDL.
func (t Table[T]) createSQL() string {
	return fmt.Sprintf("CREATE TEMP TABLE %s (LIKE %s INCLUDING DEFAULTS) ON COMMIT DROP",
		pgx.Identifier{stagingTable}.Sanitize(), ident(t.Name))
}

// upsertFrom builds the upsert of the rows of source, a relation with the
// table's Columns (the staging table, or a VALUES list). aliased says
// that source already names itself s, which Where refers to.
func (t Table[T]) upsertFrom(source string, aliased bool) string {
	var b strings.Builder
	cols := identList(t.Columns)
	key := identList(t.Key)
	fmt.Fprintf(&b, "INSERT INTO %s AS t (%s)\nSELECT %s FROM %s\n", ident(t.Name), cols, cols, source)
	if t.Where != "" {
		if !aliased {
			b.WriteString("AS s ")
		}
		fmt.Fprintf(&b, "WHERE (%s)\n", t.Where)
	}
	if len(t.Update) == 0 && t.AnyConflict {
		b.WriteString("ON CONFLICT DO NOTHING")
		return b.String()
	}
	fmt.Fprintf(&b, "ON CONFLICT (%s) ", key)
	if len(t.Update) == 0 {
		b.WriteString("DO NOTHING")
		return b.String()
	}
	b.WriteString("DO UPDATE SET\n")
	var targets, exprs []string
	for _, s := range t.Update {
		col := pgx.Identifier{s.Column}.Sanitize()
		fmt.Fprintf(&b, "  %s = %s,\n", col, s.Expr)
		targets = append(targets, "t."+col)
		exprs = append(exprs, s.Expr)
	}
	for _, c := range t.Touch {
		fmt.Fprintf(&b, "  %s = now(),\n", pgx.Identifier{c}.Sanitize())
	}
	out := strings.TrimSuffix(b.String(), ",\n")
	if !t.UpdateUnchanged {
		out += fmt.Sprintf("\nWHERE (%s) IS DISTINCT FROM (%s)",
			strings.Join(targets, ", "), strings.Join(exprs, ", "))
	}
	return out
}

// UpsertSQL returns the statement that applies the staging table to the
// target (for documentation and tests). It has no ORDER BY: the rows are
// sorted by key before they are COPYed into the staging table, and a
// sequential scan of that fresh temporary table returns them in that order.
// Rows of new keys written directly (see the package documentation) do not
// go through it.
func (s *Sink[T]) UpsertSQL() string { return s.upsertSQL }

// group is one merged row and the batch indexes it stands for, in order.
type group[T any] struct {
	key   string
	row   T
	items []int
	vals  []any // Values(row), computed once the group is complete
	// fallback: row is Table.Fallback's replacement of a refused row
	fallback bool
}

// rejected is a group the database refused: pe is the server's error,
// cause the error the rejection reports (pe, or an [*encodeFailed]
// wrapping it).
type rejected[T any] struct {
	g     *group[T]
	pe    *pgconn.PgError
	cause error
}

// Write upserts batch (items in partition order: later items are newer).
// See the package documentation for the error contract.
func (s *Sink[T]) Write(ctx context.Context, batch []T) error {
	_, err := s.WriteCount(ctx, batch)
	return err
}

// WriteCount is Write that also returns how many rows the database
// reported inserted or updated: a row skipped by DO NOTHING, by Where or as
// an unchanged update does not count, and a merged row counts once. The
// count includes the rows of transactions that committed before an error
// (a batch failing half-way and written again counts its rows once in all).
func (s *Sink[T]) WriteCount(ctx context.Context, batch []T) (int64, error) {
	if len(batch) == 0 {
		return 0, nil
	}
	start := time.Now()
	s.m.batch.Observe(float64(len(batch)))
	groups := s.merge(batch)
	if d := len(batch) - len(groups); d > 0 {
		s.m.merged.Add(float64(d))
	}
	w := writer[T]{s: s, db: s.db, batch: batch}
	var err error
	if s.offsets {
		err = s.writeWithOffset(ctx, &w, groups)
	} else {
		err = w.bisect(ctx, groups, false)
	}
	s.m.written.Add(float64(w.written))
	if err != nil {
		s.m.duration.WithLabelValues("error").Observe(time.Since(start).Seconds())
		return w.affected, fmt.Errorf("pgsink: upsert %d row(s) into %s: %w", len(groups), s.table.Name, err)
	}
	if len(w.rejected) == 0 {
		s.m.duration.WithLabelValues("ok").Observe(time.Since(start).Seconds())
		return w.affected, nil
	}
	s.m.duration.WithLabelValues("rejected").Observe(time.Since(start).Seconds())
	rej := &stages.Rejections{}
	for _, r := range w.rejected {
		rule := "pg." + r.pe.Code
		switch {
		case copyAborted(r.cause):
			rule = "pg.encode"
		case r.pe.ConstraintName != "":
			rule += "." + r.pe.ConstraintName
		}
		e := fmt.Errorf("pgsink: %s refused the row of key %q: %w", s.table.Name, r.g.key, r.cause)
		s.m.rejected.WithLabelValues(rule).Add(float64(len(r.g.items)))
		s.log.Warn("row rejected", "rule", rule, "items", len(r.g.items), "err", r.pe.Message)
		for _, i := range r.g.items {
			rej.Items = append(rej.Items, stages.Rejection{Index: i, Rule: rule, Err: e})
		}
	}
	slices.SortFunc(rej.Items, func(a, b stages.Rejection) int { return a.Index - b.Index })
	return w.affected, rej
}

// merge sorts the batch by key (KeyOf, byte order: every writer then takes
// its row locks and unique-index waits in the same order) and folds the
// items of one key into one group, in batch order. A batch whose keys are
// distinct (a coalescing window's output, already merged by the runtime)
// is not merged again: Merge is called only for a key's second and later
// items.
func (s *Sink[T]) merge(batch []T) []*group[T] {
	keys := make([]string, len(batch))
	order := make([]int, len(batch))
	for i, item := range batch {
		keys[i], order[i] = s.table.KeyOf(item), i
	}
	// Stable by key (batch order within a key) with an O(n log n) sort:
	// SortStableFunc's in-place merging costs a multiple of it.
	slices.SortFunc(order, func(a, b int) int {
		if c := strings.Compare(keys[a], keys[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	store := make([]group[T], 0, len(batch))
	for j, i := range order {
		if n := len(store); n > 0 && store[n-1].key == keys[i] {
			g := &store[n-1]
			if s.table.Merge != nil {
				g.row = s.table.Merge(g.row, batch[i])
			} else {
				g.row = batch[i]
			}
			g.items = order[j-len(g.items) : j+1] // the key's items are consecutive in order
			continue
		}
		store = append(store, group[T]{key: keys[i], row: batch[i], items: order[j : j+1]})
	}
	groups := make([]*group[T], len(store))
	for i := range store {
		groups[i] = &store[i]
		if s.table.AppendCopy == nil {
			groups[i].vals = s.table.Values(groups[i].row)
		}
	}
	return groups
}

// writer holds the state of one Write.
type writer[T any] struct {
	s        *Sink[T]
	db       Beginner // where its transactions begin: the sink's pool, or the Write's transaction (WithOffsets)
	batch    []T
	written  int
	affected int64 // rows the committed transactions inserted or updated
	rejected []rejected[T]
}

// bisect writes gs, isolating rows the database refuses permanently. When
// knownBad is set, gs is known to contain a refused row (its sibling half
// landed while the parent failed), so the attempt on the whole is skipped.
func (w *writer[T]) bisect(ctx context.Context, gs []*group[T], knownBad bool) error {
	if !knownBad || len(gs) == 1 {
		n, err := w.s.attempt(ctx, w.db, gs)
		if err == nil {
			w.affected += n
			w.s.m.txs.WithLabelValues("ok").Inc()
			for _, g := range gs {
				w.written += len(g.items)
			}
			return nil
		}
		pe, cause, ok := w.s.rowError(err)
		if !ok {
			w.s.m.txs.WithLabelValues("error").Inc()
			return err
		}
		w.s.m.txs.WithLabelValues("row_error").Inc()
		if len(gs) == 1 {
			if len(gs[0].items) > 1 {
				return w.itemByItem(ctx, gs[0])
			}
			if fb, ok := w.fallback(gs[0], cause); ok {
				return w.bisect(ctx, []*group[T]{fb}, false)
			}
			w.rejected = append(w.rejected, rejected[T]{g: gs[0], pe: pe, cause: cause})
			return nil
		}
		w.s.log.Debug("bisecting batch", "rows", len(gs), "sqlstate", pe.Code)
	}
	mid := len(gs) / 2
	before := len(w.rejected)
	if err := w.bisect(ctx, gs[:mid], false); err != nil {
		return err
	}
	return w.bisect(ctx, gs[mid:], len(w.rejected) == before)
}

// itemByItem writes the items merged into g, a row the database refused,
// one at a time in batch order (later items are newer), so that each lands
// or is rejected on its own, as in a batch of its own.
func (w *writer[T]) itemByItem(ctx context.Context, g *group[T]) error {
	w.s.log.Debug("merged row refused, writing its items one at a time", "items", len(g.items))
	for _, i := range g.items {
		row := w.batch[i]
		one := &group[T]{key: g.key, row: row, items: []int{i}, vals: w.s.table.Values(row)}
		if err := w.bisect(ctx, []*group[T]{one}, false); err != nil {
			return err
		}
	}
	return nil
}

// fallback returns the replacement Table.Fallback offers for g, a refused
// row of one item, unless g is a replacement already.
func (w *writer[T]) fallback(g *group[T], refusal error) (*group[T], bool) {
	if w.s.table.Fallback == nil || g.fallback {
		return nil, false
	}
	row, ok := w.s.table.Fallback(g.row, refusal)
	if !ok {
		return nil, false
	}
	w.s.log.Debug("row refused, writing its fallback", "err", refusal)
	return &group[T]{key: g.key, row: row, items: g.items, vals: w.s.table.Values(row), fallback: true}, true
}

// rowError returns the server error, and the error to report (the server
// error, or the [*encodeFailed] wrapping it), when err is caused by the
// rows' values. A NOT NULL violation on a column the sink does not write is
// a schema mismatch that no row can fix, so it is not a row error.
func (s *Sink[T]) rowError(err error) (*pgconn.PgError, error, bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !(permanentState(pe.Code) || copyAborted(err)) {
		return nil, nil, false
	}
	if pe.Code == "23502" && pe.ColumnName != "" && !s.columns[pe.ColumnName] {
		return nil, nil, false
	}
	var ef *encodeFailed
	if errors.As(err, &ef) {
		return pe, ef, true
	}
	return pe, pe, true
}

// attempt applies gs in one transaction: with one INSERT … VALUES when
// they are few (see WithSmallBatch), else by COPY (see direct). If the
// direct COPY hits a unique violation (a key the lookup did not see was
// inserted meanwhile by another writer, or a row breaks another unique
// index), the transaction is rolled back and gs upserted in a new one.
// It returns how many rows the committed transaction inserted or updated.
func (s *Sink[T]) attempt(ctx context.Context, db Beginner, gs []*group[T]) (n int64, err error) {
	if s.small(gs) {
		err := s.inTx(ctx, db, func(tx pgx.Tx) (err error) { n, err = s.insertValues(ctx, tx, gs); return err })
		if !errors.Is(err, errUseCopy) {
			s.m.attempts.WithLabelValues("insert").Inc()
			return n, err
		}
		// Nothing was sent.
		s.log.Debug("writing through COPY", "rows", len(gs), "reason", err)
	}
	s.m.attempts.WithLabelValues("copy").Inc()
	if !s.upsertOnly {
		err := s.inTx(ctx, db, func(tx pgx.Tx) (err error) { n, err = s.direct(ctx, tx, gs); return err })
		var cc copyConflict
		if !errors.As(err, &cc) {
			return n, err
		}
		s.m.txs.WithLabelValues("conflict").Inc()
		s.log.Debug("unique violation on copy, upserting instead", "rows", len(gs), "err", err)
	}
	err = s.inTx(ctx, db, func(tx pgx.Tx) (err error) { n, err = s.upsert(ctx, tx, gs); return err })
	return n, err
}

// inTx runs fn in a transaction of db and commits it. With [WithOffsets]
// db is the Write's transaction: the "transaction" is a savepoint, and its
// commit releases it.
func (s *Sink[T]) inTx(ctx context.Context, db Beginner, fn func(pgx.Tx) error) (err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// copyRows COPYs the values of gs into table (for a table with
// AppendCopy, its binary encoding: see copyBinary, which never aborts).
// When pgx cannot encode a row's values for its columns (an int64 beyond
// an int4 column's range, a string that is no uuid, …), it aborts the COPY
// and PostgreSQL answers with SQLSTATE 57014, the code of a statement
// timeout too, in a message translated to the session's lc_messages;
// copyRows then returns an
// [*encodeFailed] naming the row, recognised on the client side, so
// whatever the server's language.
func (s *Sink[T]) copyRows(ctx context.Context, tx pgx.Tx, table pgx.Identifier, gs []*group[T]) (int64, error) {
	if s.table.AppendCopy != nil {
		return s.copyBinary(ctx, tx, table, gs)
	}
	src := &rowSource[T]{gs: gs}
	n, err := tx.CopyFrom(ctx, table, s.table.Columns, src)
	if err != nil && src.taken && SQLState(err) == "57014" {
		return n, &encodeFailed{key: gs[src.next-1].key, err: err}
	}
	return n, err
}

// rowSource is the pgx.CopyFromSource of copyRows. pgx reads it in its own
// goroutine and has finished with it when CopyFrom returns. For each chunk
// of rows pgx calls Next and Values, encoding each row's values, then Err;
// it stops without calling Next or Err again only when it cannot encode the
// values just taken (or their number is not that of the columns), and
// then aborts the COPY. So taken, still set when CopyFrom returns, means
// that pgx aborted the COPY on row next-1.
type rowSource[T any] struct {
	gs    []*group[T]
	next  int  // rows handed to pgx by Next
	taken bool // Values was called since the last Next or Err
}

func (r *rowSource[T]) Next() bool {
	r.taken = false
	if r.next == len(r.gs) {
		return false
	}
	r.next++
	return true
}

func (r *rowSource[T]) Values() ([]any, error) {
	r.taken = true
	return r.gs[r.next-1].vals, nil
}

func (r *rowSource[T]) Err() error {
	r.taken = false
	return nil
}

// encodeFailed is a COPY that pgx aborted because it could not encode the
// values of the row of key for their columns; err is the server's answer
// (SQLSTATE 57014). No retry changes that: see [IsPermanent].
type encodeFailed struct {
	key string
	err error
}

func (e *encodeFailed) Error() string {
	return fmt.Sprintf("the client could not encode the row of key %q for COPY: %v", e.key, e.err)
}

func (e *encodeFailed) Unwrap() error { return e.err }

// upsert COPYs gs into a fresh staging table and upserts them from there;
// it returns how many rows the upsert inserted or updated.
func (s *Sink[T]) upsert(ctx context.Context, tx pgx.Tx, gs []*group[T]) (int64, error) {
	if _, err := tx.Exec(ctx, s.createSQL); err != nil {
		return 0, fmt.Errorf("create staging table: %w", err)
	}
	if _, err := s.copyRows(ctx, tx, pgx.Identifier{stagingTable}, gs); err != nil {
		return 0, fmt.Errorf("copy into staging table: %w", err)
	}
	tag, err := tx.Exec(ctx, s.upsertSQL)
	if err != nil {
		return 0, fmt.Errorf("upsert: %w", err)
	}
	if s.offsets {
		// The staging table is dropped at the commit of the Write's
		// transaction only, and the next savepoint creates it again.
		if _, err := tx.Exec(ctx, "DROP TABLE "+pgx.Identifier{stagingTable}.Sanitize()); err != nil {
			return 0, fmt.Errorf("drop staging table: %w", err)
		}
	}
	return tag.RowsAffected(), nil
}

// Direct COPY of new keys pays off when most keys of a batch are new: the
// lookup of existing keys costs PostgreSQL about half of what the COPY
// saves per new key (BenchmarkWriteLarge, before this threshold: with half
// the keys new, splitting the batch cost as much as upserting it whole).
const (
	// lookupSample is how many keys, evenly spaced in key order, are
	// looked up first in a batch of more than twice as many.
	lookupSample = 64
	// minNewNum/minNewDen is the share of new keys (in the sample, then in
	// the batch) below which the whole batch is upserted.
	minNewNum, minNewDen = 3, 4
)

// direct writes gs: when at least 3/4 of a sample of their keys are new, it
// looks up which keys exist, COPYs the rows of the new ones straight into
// the target and upserts the others through the staging table; otherwise
// (or when fewer than 3/4 of all keys turn out to be new) it upserts all.
// It returns how many rows it inserted or updated.
func (s *Sink[T]) direct(ctx context.Context, tx pgx.Tx, gs []*group[T]) (int64, error) {
	probe, err := s.probe(ctx, tx)
	if err != nil {
		return 0, err
	}
	if len(gs) > 2*lookupSample {
		sample := make([]*group[T], lookupSample)
		for i := range sample {
			sample[i] = gs[i*len(gs)/lookupSample]
		}
		_, _, ok, err := s.lookupMostlyNew(ctx, tx, probe, sample)
		if err != nil {
			return 0, err
		}
		if !ok {
			return s.upsert(ctx, tx, gs)
		}
	}
	exists, n, ok, err := s.lookupMostlyNew(ctx, tx, probe, gs)
	if err != nil {
		return 0, err
	}
	if !ok {
		return s.upsert(ctx, tx, gs)
	}
	fresh, updated := gs, int64(0)
	if n > 0 {
		fresh = make([]*group[T], 0, len(gs)-n)
		old := make([]*group[T], 0, n)
		for i, g := range gs {
			if exists[i] {
				old = append(old, g)
			} else {
				fresh = append(fresh, g)
			}
		}
		if updated, err = s.upsert(ctx, tx, old); err != nil {
			return 0, err
		}
	}
	inserted, err := s.copyRows(ctx, tx, s.target, fresh)
	if err != nil {
		if SQLState(err) == "23505" {
			return 0, copyConflict{err}
		}
		return 0, fmt.Errorf("copy new rows: %w", err)
	}
	return updated + inserted, nil
}

// lookupMostlyNew runs lookup on gs and reports with ok whether most of
// their keys are new (mostlyNew). A lookup that failed unsent is no error:
// ok is false, and the caller upserts.
func (s *Sink[T]) lookupMostlyNew(ctx context.Context, tx pgx.Tx, probe string, gs []*group[T]) (exists []bool, n int, ok bool, err error) {
	exists, n, err = s.lookup(ctx, tx, probe, gs)
	if err != nil {
		if s.unsent(ctx, err) {
			return nil, 0, false, nil
		}
		return nil, 0, false, err
	}
	return exists, n, mostlyNew(len(gs), n), nil
}

// unsent reports whether the lookup of existing keys failed before
// PostgreSQL saw it: pgx could not encode a key for the array of its
// column's type (an int64 beyond an int4 key's range, say). The transaction
// is intact, and the upsert then decides: its COPY fails on that row, which
// the bisection isolates and rejects, instead of the write failing, and
// being retried, for ever. (A server error aborts the transaction; a
// network error or a cancelled context fails the upsert as well.)
func (s *Sink[T]) unsent(ctx context.Context, err error) bool {
	return SQLState(err) == "" && !IsTransient(err) && ctx.Err() == nil
}

// copyConflict is a unique violation on the direct COPY of new keys.
type copyConflict struct{ err error }

func (c copyConflict) Error() string { return "copy new rows: " + c.err.Error() }
func (c copyConflict) Unwrap() error { return c.err }

// mostlyNew reports whether at least minNewNum/minNewDen of total keys, of
// which existing exist, are new.
func mostlyNew(total, existing int) bool {
	return minNewDen*(total-existing) >= minNewNum*total
}

// lookup runs probe on the keys of gs: exists[i] reports whether gs[i]'s
// key is in the table, n how many are.
func (s *Sink[T]) lookup(ctx context.Context, tx pgx.Tx, probe string, gs []*group[T]) (exists []bool, n int, err error) {
	// One array of values per key column. Encoding []any needs the
	// parameter types: unless the connection caches statement
	// descriptions, describe the statement (also in exec or simple protocol
	// mode: COPY describes the table anyway).
	var args []any
	switch tx.Conn().Config().DefaultQueryExecMode {
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe:
	default:
		args = append(args, pgx.QueryExecModeDescribeExec)
	}
	cols := make([][]any, len(s.keyPos))
	for j := range cols {
		cols[j] = make([]any, len(gs))
	}
	for i, g := range gs {
		switch {
		case s.table.KeyValues != nil:
			kv := s.table.KeyValues(g.row)
			if len(kv) != len(cols) {
				return nil, 0, fmt.Errorf("look up existing keys: KeyValues gave %d value(s) for %d key column(s)", len(kv), len(cols))
			}
			for j, v := range kv {
				cols[j][i] = v
			}
		default:
			if g.vals == nil {
				g.vals = s.table.Values(g.row)
			}
			for j, p := range s.keyPos {
				cols[j][i] = g.vals[p]
			}
		}
	}
	for _, col := range cols {
		args = append(args, col)
	}
	registerTextTypes(tx.Conn().TypeMap(), s.textTypes)
	rows, err := tx.Query(ctx, probe, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("look up existing keys: %w", err)
	}
	exists = make([]bool, len(gs))
	var ord int64
	_, err = pgx.ForEachRow(rows, []any{&ord}, func() error {
		if ord < 1 || ord > int64(len(gs)) {
			return fmt.Errorf("ordinal %d out of range", ord)
		}
		if !exists[ord-1] {
			exists[ord-1] = true
			n++
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("look up existing keys: %w", err)
	}
	return exists, n, nil
}

// probe returns the statement that finds which of a batch's keys exist:
// it takes one array per key column and returns the 1-based positions of
// the keys found. The key columns' types are read from the catalog once.
func (s *Sink[T]) probe(ctx context.Context, tx pgx.Tx) (string, error) {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probeSQL != "" {
		return s.probeSQL, nil
	}
	rows, err := tx.Query(ctx, `SELECT a.attname, format_type(a.atttypid, NULL), t.typname, a.atttypid, t.typarray, t.typcategory = 'S'
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attname = ANY($2)`,
		ident(s.table.Name), s.table.Key)
	if err != nil {
		return "", fmt.Errorf("read key column types: %w", err)
	}
	types := map[string]string{}
	var name, typ string
	var tt textType
	var isText bool
	var textTypes []textType
	if _, err := pgx.ForEachRow(rows, []any{&name, &typ, &tt.name, &tt.oid, &tt.arrayOID, &isText}, func() error {
		types[name] = typ
		if isText && tt.arrayOID != 0 {
			textTypes = append(textTypes, tt)
		}
		return nil
	}); err != nil {
		return "", fmt.Errorf("read key column types: %w", err)
	}
	var args, us, on []string
	for j, k := range s.table.Key {
		typ, ok := types[k]
		if !ok {
			return "", fmt.Errorf("read key column types: %s has no column %q", s.table.Name, k)
		}
		args = append(args, fmt.Sprintf("$%d::%s[]", j+1, typ))
		u := fmt.Sprintf("k%d", j)
		us = append(us, u)
		on = append(on, fmt.Sprintf("t.%s = u.%s", pgx.Identifier{k}.Sanitize(), u))
	}
	s.textTypes = textTypes
	s.probeSQL = fmt.Sprintf("SELECT u.ord FROM unnest(%s) WITH ORDINALITY AS u(%s, ord)\nCROSS JOIN LATERAL (SELECT FROM %s AS t WHERE %s LIMIT 1) AS found",
		strings.Join(args, ", "), strings.Join(us, ", "), ident(s.table.Name), strings.Join(on, " AND "))
	return s.probeSQL, nil
}

// textType is a key column type of PostgreSQL's string category (citext,
// a domain over text, …) and its array type.
type textType struct {
	name          string
	oid, arrayOID uint32
}

// registerTextTypes registers on m each of types that m does not know, as
// text, with its array type. pgx encodes a value of a type it does not
// know as text, except in an array of values of any Go type: without this,
// the lookup of a citext key, sent as such an array, could not be encoded
// and every batch of the table was upserted through the staging table. m
// is one connection's type map; registering a type twice is harmless.
func registerTextTypes(m *pgtype.Map, types []textType) {
	for _, tt := range types {
		if _, ok := m.TypeForOID(tt.arrayOID); ok {
			continue
		}
		elem, ok := m.TypeForOID(tt.oid)
		if !ok {
			elem = &pgtype.Type{Name: tt.name, OID: tt.oid, Codec: pgtype.TextCodec{}}
			m.RegisterType(elem)
		}
		m.RegisterType(&pgtype.Type{Name: "_" + tt.name, OID: tt.arrayOID, Codec: &pgtype.ArrayCodec{ElementType: elem}})
	}
}
