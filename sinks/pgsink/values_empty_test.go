package pgsink_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/pgsink"
)

type noteRow struct{ Note, K string }

// An empty string in the first parameter of the statement (encoded to zero
// bytes before any other value) is ” as with COPY, not NULL.
func TestSmallBatchLeadingEmptyStringIsNotNull(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, path writePath) {
		pg := testkit.NewPostgres(t)
		ctx := testkit.Context(t)
		if _, err := pg.Pool.Exec(ctx, `CREATE TABLE notes (note text, k text PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		s, err := pgsink.New(pg.Pool, pgsink.Table[noteRow]{
			Name: "notes", Columns: []string{"note", "k"}, Key: []string{"k"},
			Update: []pgsink.Set{{Column: "note", Expr: "EXCLUDED.note"}},
			KeyOf:  func(r noteRow) string { return r.K },
			Values: func(r noteRow) []any { return []any{r.Note, r.K} },
		}, path.opt)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Write(ctx, []noteRow{{"", "a"}, {"x", "b"}}); err != nil {
			t.Fatal(err)
		}
		var isNull bool
		if err := pg.Pool.QueryRow(ctx, "SELECT note IS NULL FROM notes WHERE k = 'a'").Scan(&isNull); err != nil {
			t.Fatal(err)
		}
		if isNull {
			t.Errorf("note of key a is NULL, want ''")
		}
	})
}

// An empty key in the first row is written, not refused as a NULL key.
func TestSmallBatchEmptyKeyFirstIsWritten(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, path writePath) {
		pg := testkit.NewPostgres(t)
		ctx := testkit.Context(t)
		if _, err := pg.Pool.Exec(ctx, `CREATE TABLE notes (k text PRIMARY KEY, note text)`); err != nil {
			t.Fatal(err)
		}
		s, err := pgsink.New(pg.Pool, pgsink.Table[noteRow]{
			Name: "notes", Columns: []string{"k", "note"}, Key: []string{"k"},
			Update: []pgsink.Set{{Column: "note", Expr: "EXCLUDED.note"}},
			KeyOf:  func(r noteRow) string { return r.K },
			Values: func(r noteRow) []any { return []any{r.K, r.Note} },
		}, path.opt)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Write(ctx, []noteRow{{K: "", Note: "x"}, {K: "b", Note: "y"}})
		var n int
		if err2 := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM notes").Scan(&n); err2 != nil {
			t.Fatal(err2)
		}
		if err != nil || n != 2 {
			t.Errorf("Write: %v; %d rows in the table, want 2", err, n)
		}
	})
}

// statements records the SQL of every query and prepare of a pool.
type statements struct {
	mu  sync.Mutex
	sql []string
}

func (r *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sql = append(r.sql, d.SQL)
	return ctx
}

func (*statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *statements) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sql = append(r.sql, d.SQL)
	return ctx
}

func (*statements) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// A table with AppendCopy (silver's) encodes its rows for COPY only: its
// small batches go straight to COPY, without first opening the
// statement's transaction, describing the columns and rolling it back.
func TestSmallBatchOfAnAppendCopyTableGoesToCopy(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t)
	ctx := testkit.Context(t)
	if _, err := pg.Pool.Exec(ctx, `CREATE TABLE notes (k text PRIMARY KEY, note text)`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	trace := &statements{}
	cfg.ConnConfig.Tracer = trace
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reg := prometheus.NewRegistry()
	s, err := pgsink.New(pool, pgsink.Table[noteRow]{
		Name: "notes", Columns: []string{"k", "note"}, Key: []string{"k"},
		Update: []pgsink.Set{{Column: "note", Expr: "EXCLUDED.note"}},
		KeyOf:  func(r noteRow) string { return r.K },
		Values: func(r noteRow) []any { return []any{r.K, r.Note} },
		AppendCopy: func(b []byte, r noteRow) []byte {
			return pgsink.AppendText(pgsink.AppendText(b, r.K), r.Note)
		},
	}, pgsink.WithRegisterer(reg, "test"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []noteRow{{K: "a", Note: "x"}, {K: "b", Note: ""}}); err != nil {
		t.Fatal(err)
	}
	ins := testkit.Metric(t, reg, "sluice_pgsink_attempts_total", "path", "insert")
	cp := testkit.Metric(t, reg, "sluice_pgsink_attempts_total", "path", "copy")
	if ins != 0 || cp != 1 {
		t.Errorf("attempts insert %v, copy %v; want 0, 1", ins, cp)
	}
	trace.mu.Lock()
	defer trace.mu.Unlock()
	for _, q := range trace.sql {
		if strings.Contains(q, "atttypmod") || strings.Contains(q, "unnest($1::oid[])") {
			t.Errorf("the columns were described for the statement path: %s", q)
		}
	}
	var n int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM notes WHERE note IS NOT NULL`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d rows with a note (%v), want 2", n, err)
	}
}
