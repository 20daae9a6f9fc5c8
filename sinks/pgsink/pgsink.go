// Package pgsink is a PostgreSQL upsert sink built for throughput: one Write
// merges the batch by natural key in memory, COPYs the rows into a temporary
// staging table and applies them to the target with a single
// INSERT … SELECT … ON CONFLICT … DO UPDATE, all in one transaction.
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
//     caller's batch. With k bad rows among n the cost is about
//     k·log2(n) extra transactions.
//   - When several items of one key were merged, a refused merged row rejects
//     every original item of that key (the merged row is what was refused;
//     the sink does not try the items one by one).
//   - Any other error (transient ones, see [IsTransient], but also schema
//     errors such as an undefined table) is returned as an ordinary error:
//     the runtime retries the whole batch. Halves that landed before such an
//     error are written again by the retry, which the upsert makes harmless.
//
// A Sink is safe for concurrent use; concurrent writers to one table sort
// their rows by the conflict key, which avoids lock-order deadlocks between
// them (a deadlock that still happens is transient and retried).
package pgsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	// Touch are columns set to now() whenever a conflicting row is updated
	// (e.g. ingest_time).
	Touch []string
	// UpdateUnchanged, when true, updates a conflicting row even when no
	// Update column changes (Touch columns then move on every redelivery).
	// By default such no-op updates are skipped.
	UpdateUnchanged bool
	// KeyOf returns the natural key of a row as one string; items with the
	// same key in one batch are merged before the statement.
	KeyOf func(T) string
	// Merge combines an earlier item (old) with a later one (next) of the
	// same key exactly as the Update clause would; nil means the later item
	// wins.
	Merge func(old, next T) T
	// Values returns a row's column values in Columns order (nil = NULL),
	// as pgx encodes them for COPY.
	Values func(T) []any
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
	o := options{log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	var reg prometheus.Registerer
	if o.reg != nil {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": o.pipeline, "table": table.Name}, o.reg)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Sink[T]{
		db:      db,
		table:   table,
		columns: make(map[string]bool, len(table.Columns)),
		m:       m,
		log:     o.log.With("table", table.Name),
	}
	for _, c := range table.Columns {
		s.columns[c] = true
	}
	s.createSQL, s.upsertSQL = table.sql()
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

// sql builds the staging DDL and the upsert statement.
func (t Table[T]) sql() (create, upsert string) {
	create = fmt.Sprintf("CREATE TEMP TABLE %s (LIKE %s INCLUDING DEFAULTS) ON COMMIT DROP",
		pgx.Identifier{stagingTable}.Sanitize(), ident(t.Name))
	var b strings.Builder
	cols := identList(t.Columns)
	key := identList(t.Key)
	fmt.Fprintf(&b, "INSERT INTO %s AS t (%s)\nSELECT %s FROM %s ORDER BY %s\nON CONFLICT (%s) ",
		ident(t.Name), cols, cols, pgx.Identifier{stagingTable}.Sanitize(), key, key)
	if len(t.Update) == 0 {
		b.WriteString("DO NOTHING")
		return create, b.String()
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
	return create, out
}

// UpsertSQL returns the statement the sink runs after the COPY (for
// documentation and tests).
func (s *Sink[T]) UpsertSQL() string { return s.upsertSQL }

// group is one merged row and the batch indexes it stands for, in order.
type group[T any] struct {
	row   T
	items []int
}

// rejected is a group the database refused.
type rejected[T any] struct {
	g   *group[T]
	err *pgconn.PgError
}

// Write upserts batch (items in partition order: later items are newer).
// See the package documentation for the error contract.
func (s *Sink[T]) Write(ctx context.Context, batch []T) error {
	if len(batch) == 0 {
		return nil
	}
	start := time.Now()
	s.m.batch.Observe(float64(len(batch)))
	groups := s.merge(batch)
	if d := len(batch) - len(groups); d > 0 {
		s.m.merged.Add(float64(d))
	}
	w := writer[T]{s: s}
	err := w.bisect(ctx, groups, false)
	s.m.written.Add(float64(w.written))
	if err != nil {
		s.m.duration.WithLabelValues("error").Observe(time.Since(start).Seconds())
		return fmt.Errorf("pgsink: upsert %d row(s) into %s: %w", len(groups), s.table.Name, err)
	}
	if len(w.rejected) == 0 {
		s.m.duration.WithLabelValues("ok").Observe(time.Since(start).Seconds())
		return nil
	}
	s.m.duration.WithLabelValues("rejected").Observe(time.Since(start).Seconds())
	rej := &stages.Rejections{}
	for _, r := range w.rejected {
		rule := "pg." + r.err.Code
		if r.err.ConstraintName != "" {
			rule += "." + r.err.ConstraintName
		}
		e := fmt.Errorf("pgsink: %s refused the row of key %q: %w", s.table.Name, s.table.KeyOf(r.g.row), r.err)
		s.m.rejected.WithLabelValues(rule).Add(float64(len(r.g.items)))
		s.log.Warn("row rejected", "rule", rule, "items", len(r.g.items), "err", r.err.Message)
		for _, i := range r.g.items {
			rej.Items = append(rej.Items, stages.Rejection{Index: i, Rule: rule, Err: e})
		}
	}
	slices.SortFunc(rej.Items, func(a, b stages.Rejection) int { return a.Index - b.Index })
	return rej
}

// merge folds the items of one key into one group, keeping the order of
// first appearance.
func (s *Sink[T]) merge(batch []T) []*group[T] {
	groups := make([]*group[T], 0, len(batch))
	byKey := make(map[string]*group[T], len(batch))
	for i, item := range batch {
		k := s.table.KeyOf(item)
		if g, ok := byKey[k]; ok {
			if s.table.Merge != nil {
				g.row = s.table.Merge(g.row, item)
			} else {
				g.row = item
			}
			g.items = append(g.items, i)
			continue
		}
		g := &group[T]{row: item, items: []int{i}}
		byKey[k] = g
		groups = append(groups, g)
	}
	return groups
}

// writer holds the state of one Write.
type writer[T any] struct {
	s        *Sink[T]
	written  int
	rejected []rejected[T]
}

// bisect writes gs, isolating rows the database refuses permanently. When
// knownBad is set, gs is known to contain a refused row (its sibling half
// landed while the parent failed), so the attempt on the whole is skipped.
func (w *writer[T]) bisect(ctx context.Context, gs []*group[T], knownBad bool) error {
	if !knownBad || len(gs) == 1 {
		err := w.s.attempt(ctx, gs)
		if err == nil {
			w.s.m.txs.WithLabelValues("ok").Inc()
			for _, g := range gs {
				w.written += len(g.items)
			}
			return nil
		}
		pe, ok := w.s.rowError(err)
		if !ok {
			w.s.m.txs.WithLabelValues("error").Inc()
			return err
		}
		w.s.m.txs.WithLabelValues("row_error").Inc()
		if len(gs) == 1 {
			w.rejected = append(w.rejected, rejected[T]{g: gs[0], err: pe})
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

// rowError returns the server error when err is caused by the rows' values.
// A NOT NULL violation on a column the sink does not write is a schema
// mismatch that no row can fix, so it is not a row error.
func (s *Sink[T]) rowError(err error) (*pgconn.PgError, bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !permanentState(pe.Code) {
		return nil, false
	}
	if pe.Code == "23502" && pe.ColumnName != "" && !s.columns[pe.ColumnName] {
		return nil, false
	}
	return pe, true
}

// attempt applies gs in one transaction.
func (s *Sink[T]) attempt(ctx context.Context, gs []*group[T]) (err error) {
	tx, err := s.db.Begin(ctx)
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
	if _, err := tx.Exec(ctx, s.createSQL); err != nil {
		return fmt.Errorf("create staging table: %w", err)
	}
	src := pgx.CopyFromSlice(len(gs), func(i int) ([]any, error) {
		return s.table.Values(gs[i].row), nil
	})
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{stagingTable}, s.table.Columns, src); err != nil {
		return fmt.Errorf("copy into staging table: %w", err)
	}
	if _, err := tx.Exec(ctx, s.upsertSQL); err != nil {
		return fmt.Errorf("upsert: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
