package pgsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// DefaultSmallBatch is the number of rows up to which a sink built without
// [WithSmallBatch] writes a batch with one INSERT … VALUES statement.
// BenchmarkSmallBatch (a local PostgreSQL, the statements prepared): where
// COPY goes through the staging table (a table with Where, such as the
// modules mirror's, or keys that exist) the statement takes 0.1–0.5 of
// COPY's time up to 64 rows and 0.65–1.0 at 256; where COPY goes straight
// into the table (new keys, no Where) it takes 0.6–0.9 up to 32 rows and
// 1.4 times as long at 64 and 256. So up to 32 rows the statement is
// never the slower.
const DefaultSmallBatch = 32

// maxParams is PostgreSQL's limit on the bind parameters of a statement.
const maxParams = 65535

// WithSmallBatch sets the number of rows (after merging by key) up to
// which a write is sent as one INSERT … VALUES … ON CONFLICT statement with
// bind parameters, one round trip, instead of COPY (default
// [DefaultSmallBatch]; 0 or less: always COPY). The statement is the
// upsert of the package documentation with the VALUES list in place of the
// staging table: the same conflict key, Update and Touch columns, Where
// condition and skip of unchanged rows, the rows in the same key order; so
// the rows written, the rejections (with their rules) and the counts are
// those of COPY. A batch whose rows need more than 65535 parameters (rows ×
// columns) goes through COPY whatever the setting. The values are encoded
// as COPY encodes them (binary, for the columns' types); when pgx cannot
// encode one that way the batch is written through COPY, which rejects the
// row as it always does (rule pg.encode). Bisection halves and retries of
// refused rows count their own rows, so they take the statement as well.
// With Table.Where some tables and rows need COPY all the same (see
// columnInfo). When the connection caches statements (pgx's default
// QueryExecModeCacheStatement), the statement of each batch size is
// prepared once per connection and kept until it closes: up to rows
// prepared statements per table and connection.
func WithSmallBatch(rows int) Option {
	return func(o *options) { o.small = rows }
}

// small reports whether gs are written with insertValues: they are few
// enough, they carry their values (a table with AppendCopy encodes its
// rows for COPY only, unless a retry built them with Values), and the
// table is not known to need COPY (see columnInfo).
func (s *Sink[T]) small(gs []*group[T]) bool {
	if len(gs) > s.smallRows || len(gs)*len(s.table.Columns) > maxParams {
		return false
	}
	for _, g := range gs {
		if g.vals == nil {
			return false
		}
	}
	s.colMu.Lock()
	defer s.colMu.Unlock()
	return s.cols == nil || s.cols.noValues == ""
}

// errUseCopy is insertValues' error when the statement cannot stand in
// for COPY on these rows (see columnInfo): nothing was sent, and the
// transaction is intact.
var errUseCopy = errors.New("the rows must be written through COPY")

// insertValues upserts gs with one statement, their values encoded as
// copyRows' COPY encodes them: in binary, for the types the server
// describes the columns with (a domain's base type, say). It returns how
// many rows were inserted or updated, or an error wrapping errUseCopy
// before anything is sent.
func (s *Sink[T]) insertValues(ctx context.Context, tx pgx.Tx, gs []*group[T]) (int64, error) {
	cols, err := s.columnInfo(ctx, tx)
	if err != nil {
		return 0, err
	}
	if cols.noValues != "" {
		return 0, fmt.Errorf("%s: %w", cols.noValues, errUseCopy)
	}
	m := tx.Conn().TypeMap()
	ncol := len(cols.oids)
	params := make([][]byte, 0, len(gs)*ncol)
	// Not nil: an encoder appends an empty value (an empty string) to buf
	// and returns it, which must not read as NULL (a nil result).
	buf := make([]byte, 0, 256)
	var ends []int // end of each parameter's bytes in buf, -1: NULL
	for _, g := range gs {
		if len(g.vals) != ncol {
			return 0, fmt.Errorf("row of key %q: %d values for %d columns: %w", g.key, len(g.vals), ncol, errUseCopy)
		}
		for i, v := range g.vals {
			out, err := m.Encode(cols.oids[i], pgtype.BinaryFormatCode, v, buf)
			if err != nil {
				return 0, fmt.Errorf("row of key %q, column %s: %w: %w", g.key, s.table.Columns[i], errUseCopy, err)
			}
			if out == nil {
				if cols.notNull[i] {
					return 0, fmt.Errorf("row of key %q: NULL in NOT NULL column %s: %w", g.key, s.table.Columns[i], errUseCopy)
				}
				ends = append(ends, -1)
				continue
			}
			buf = out
			ends = append(ends, len(buf))
		}
	}
	start := 0
	for _, end := range ends {
		if end < 0 {
			params = append(params, nil)
			continue
		}
		params = append(params, buf[start:end:end])
		start = end
	}
	types := make([]uint32, len(params))
	for i := range types {
		types[i] = cols.oids[i%ncol]
	}
	sql := s.valuesSQL(len(gs), cols.types)
	binary := []int16{pgtype.BinaryFormatCode}
	var res *pgconn.Result
	if tx.Conn().Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		// A statement per batch size, prepared once per connection (pgx
		// keeps it until the connection closes): the server does not
		// parse and plan it for every batch.
		sd, err := tx.Conn().Prepare(ctx, sql, sql)
		if err != nil {
			s.forgetColumns()
			return 0, fmt.Errorf("prepare insert values: %w", err)
		}
		res = tx.Conn().PgConn().ExecPrepared(ctx, sd.Name, params, binary, nil).Read()
	} else {
		res = tx.Conn().PgConn().ExecParams(ctx, sql, params, types, binary, nil).Read()
	}
	if res.Err != nil {
		if !rowError(res.Err) {
			s.forgetColumns()
		}
		return 0, fmt.Errorf("insert values: %w", res.Err)
	}
	return res.CommandTag.RowsAffected(), nil
}

// rowError reports whether err is a row's own fault (an integrity
// constraint, class 23, or a row affected twice, class 21), which says
// nothing about the table's columns: bisection hits these, and keeps the
// cached columns.
func rowError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "23") || strings.HasPrefix(pe.Code, "21"))
}

// forgetColumns drops the cached columns after a failed statement that is
// not a row's fault: the table may have changed under them, and the next
// statement reads them again.
func (s *Sink[T]) forgetColumns() {
	s.colMu.Lock()
	s.cols = nil
	s.colMu.Unlock()
}

// valuesSQL is the upsert of n rows given as bind parameters, n×columns of
// them, row after row, each cast to its column's type in types (so that a
// statement prepared without parameter types infers the ones the values
// are encoded for).
func (s *Sink[T]) valuesSQL(n int, types []string) string {
	ncol := len(s.table.Columns)
	var b strings.Builder
	b.Grow(n * ncol * 20)
	b.WriteString("(VALUES ")
	for r := range n {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range ncol {
			if c > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(r*ncol + c + 1))
			b.WriteString("::")
			b.WriteString(types[c])
		}
		b.WriteByte(')')
	}
	fmt.Fprintf(&b, ") AS s (%s)", identList(s.table.Columns))
	return s.table.upsertFrom(b.String(), true)
}

// columns is what insertValues needs to know of the table's Columns.
type columns struct {
	oids  []uint32 // the types the server describes them with, which COPY encodes its values for
	types []string // their names, as casts take them
	// With Table.Where only (else all false and noValues empty):
	// notNull[i]: Columns[i] is NOT NULL; noValues, when not empty, is
	// why the statement cannot stand in for the staging table.
	notNull  []bool
	noValues string
}

// columnInfo returns the columns of the table, read once (again after a
// failed statement).
//
// The staging table (LIKE the target) coerces the rows to the columns'
// types, type modifiers (varchar(n), numeric(p,s), …), domains and NOT
// NULL constraints as COPY fills it, before Where chooses the rows to
// write; the VALUES list only types them, and the INSERT coerces the rows
// Where chose. The difference shows only for rows Where skips, and only
// with Where: with a column of a type modifier, a domain or a collation
// other than the default (which Where's comparisons would use), every
// write of a table with Where goes through COPY; a row with NULL in a NOT
// NULL column too.
func (s *Sink[T]) columnInfo(ctx context.Context, tx pgx.Tx) (*columns, error) {
	s.colMu.Lock()
	defer s.colMu.Unlock()
	if s.cols != nil {
		return s.cols, nil
	}
	conn := tx.Conn().PgConn()
	sd, err := conn.Prepare(ctx, "", fmt.Sprintf("SELECT %s FROM %s", identList(s.table.Columns), ident(s.table.Name)), nil)
	if err != nil {
		return nil, fmt.Errorf("describe columns: %w", err)
	}
	c := &columns{oids: make([]uint32, len(sd.Fields)), notNull: make([]bool, len(sd.Fields))}
	for i, f := range sd.Fields {
		c.oids[i] = f.DataTypeOID
	}
	rows, err := tx.Query(ctx, "SELECT format_type(u.t, NULL) FROM unnest($1::oid[]) WITH ORDINALITY AS u(t, i) ORDER BY u.i", c.oids)
	if err != nil {
		return nil, fmt.Errorf("read column type names: %w", err)
	}
	if c.types, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, fmt.Errorf("read column type names: %w", err)
	}
	if s.table.Where != "" {
		rows, err := tx.Query(ctx, `SELECT a.attname, a.attnotnull, a.atttypmod <> -1, t.typtype = 'd', a.attcollation NOT IN (0, 100)
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attname = ANY($2)`, ident(s.table.Name), s.table.Columns)
		if err != nil {
			return nil, fmt.Errorf("read column types: %w", err)
		}
		var name string
		var notNull, typmod, domain, collation bool
		if _, err := pgx.ForEachRow(rows, []any{&name, &notNull, &typmod, &domain, &collation}, func() error {
			switch {
			case typmod:
				c.noValues = fmt.Sprintf("column %s has a type modifier", name)
			case domain:
				c.noValues = fmt.Sprintf("column %s is of a domain", name)
			case collation:
				c.noValues = fmt.Sprintf("column %s has a collation of its own", name)
			}
			c.notNull[slices.Index(s.table.Columns, name)] = notNull
			return nil
		}); err != nil {
			return nil, fmt.Errorf("read column types: %w", err)
		}
	}
	s.cols = c
	return c, nil
}
