package pgsink_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
)

// A batch of at most WithSmallBatch rows after merging (DefaultSmallBatch
// when unset) is written with INSERT … VALUES, bisection halves included;
// a larger one, or one needing more than 65535 bind parameters, with
// COPY; 0 always COPYs.
func TestSmallBatchPath(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	attempts := func(t *testing.T, reg prometheus.Gatherer) [2]float64 {
		t.Helper()
		return [2]float64{
			testkit.Metric(t, reg, "sluice_pgsink_attempts_total", "path", "insert"),
			testkit.Metric(t, reg, "sluice_pgsink_attempts_total", "path", "copy"),
		}
	}
	rows := func(prefix string, n int) []item {
		var b []item
		for i := range n {
			b = append(b, item{K: fmt.Sprintf("%s%06d", prefix, i), V: 1, N: n32(1)})
		}
		return b
	}
	for _, tc := range []struct {
		name  string
		opts  []pgsink.Option
		batch []item
		want  [2]float64 // attempts: insert, copy
	}{
		{"default, one row", nil, rows("a", 1), [2]float64{1, 0}},
		{"default, DefaultSmallBatch rows", nil, rows("a", pgsink.DefaultSmallBatch), [2]float64{1, 0}},
		{"default, one row more", nil, rows("a", pgsink.DefaultSmallBatch+1), [2]float64{0, 1}},
		// Rows merged by key count once.
		{"3 after merging", []pgsink.Option{pgsink.WithSmallBatch(3)}, append(rows("a", 3), rows("a", 3)...), [2]float64{1, 0}},
		{"disabled", []pgsink.Option{pgsink.WithSmallBatch(0)}, rows("a", 1), [2]float64{0, 1}},
		// 4 columns: 16384 rows need 65536 parameters, one too many.
		{"16383 rows", []pgsink.Option{pgsink.WithSmallBatch(1 << 20)}, rows("a", 16383), [2]float64{1, 0}},
		{"16384 rows", []pgsink.Option{pgsink.WithSmallBatch(1 << 20)}, rows("a", 16384), [2]float64{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			ctx, pg, s := setup(t, srv, append(tc.opts, pgsink.WithRegisterer(reg, "test"))...)
			n, err := s.WriteCount(ctx, tc.batch)
			if err != nil {
				t.Fatal(err)
			}
			if got := readItems(t, ctx, pg.Pool); int64(len(got)) != n || n == 0 {
				t.Errorf("%d rows in the table, %d reported written", len(got), n)
			}
			if got := attempts(t, reg); got != tc.want {
				t.Errorf("attempts (insert, copy) = %v, want %v", got, tc.want)
			}
		})
	}

	// The bisection of a small batch runs its halves as statements too: 4
	// rows, the last refused: the whole, the first half (which lands),
	// then the quarters of the second.
	t.Run("bisection", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		ctx, _, s := setup(t, srv, pgsink.WithRegisterer(reg, "test"))
		batch := rows("b", 4)
		batch[3].V = -1
		wantRejections(t, s.Write(ctx, batch), map[int]string{3: "pg.23514.items_v_check"})
		if got := attempts(t, reg); got != [2]float64{4, 0} {
			t.Errorf("attempts (insert, copy) = %v, want [4 0]", got)
		}
	})

	// With Where, the staging table coerces the rows to the columns' type
	// modifiers before Where, and the VALUES list does not: COPY, every
	// time (the first write learns it).
	t.Run("Where and a type modifier", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		pg := srv.Postgres(t)
		ctx := testkit.Context(t)
		if _, err := pg.Pool.Exec(ctx, itemsDDL); err != nil {
			t.Fatal(err)
		}
		table := itemsTable("items")
		table.Where = "s.n > 0"
		s, err := pgsink.New(pg.Pool, table, pgsink.WithRegisterer(reg, "test"))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range [][]item{rows("w", 2), rows("w", 3)} {
			if err := s.Write(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		// A row Where skips is still refused for its numeric(5,2) value.
		err = s.Write(ctx, []item{{K: "x", V: 1000, N: n32(0)}})
		wantRejections(t, err, map[int]string{0: "pg.22003"})
		if got := attempts(t, reg); got != [2]float64{0, 3} {
			t.Errorf("attempts (insert, copy) = %v, want [0 3]", got)
		}
	})

	// A value the statement's binary encoding cannot take is left to COPY,
	// which rejects its row as pg.encode: the attempt is counted as copy.
	t.Run("unencodable value", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		pg := srv.Postgres(t)
		ctx := testkit.Context(t)
		s := numSink(t, ctx, pg.Pool, pgsink.WithRegisterer(reg, "test"))
		before := attempts(t, reg) // numSink's first row
		err := s.Write(ctx, []num{{K: 2, V: 2}, {K: 3, V: 1 << 40}})
		wantRejections(t, err, map[int]string{1: "pg.encode"})
		got := attempts(t, reg)
		if got[1]-before[1] == 0 {
			t.Errorf("attempts (insert, copy) = %v after %v: the unencodable batch was not COPYed", got, before)
		}
	})
}

// fenced is a row of table fenced, modelled on the modules mirror: a
// citext key, written only over a smaller (epoch, version) (Table.Where).
type fenced struct {
	Ticker, Module string
	V              int64 // int column: beyond its range pgx cannot encode it
	Epoch          int64
	Version        *int64 // NOT NULL
	Note           *string
}

const fencedDDL = `CREATE TABLE fenced (
	ticker citext, module text, v int CHECK (v >= 0), epoch bigint NOT NULL, version bigint NOT NULL,
	note text, updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (ticker, module))`

func fencedTable() pgsink.Table[fenced] {
	return pgsink.Table[fenced]{
		Name: "fenced", Columns: []string{"ticker", "module", "v", "epoch", "version", "note"}, Key: []string{"ticker", "module"},
		Update: []pgsink.Set{{Column: "v", Expr: "EXCLUDED.v"}, {Column: "epoch", Expr: "EXCLUDED.epoch"},
			{Column: "version", Expr: "EXCLUDED.version"}, {Column: "note", Expr: "COALESCE(EXCLUDED.note, t.note)"}},
		Touch: []string{"updated_at"},
		Where: `NOT EXISTS (SELECT 1 FROM fenced f WHERE f.ticker = s.ticker AND f.module = s.module
	AND (f.epoch, f.version) >= (s.epoch, s.version))`,
		KeyOf: func(r fenced) string { return strings.ToUpper(r.Ticker) + ":" + r.Module },
		Merge: func(old, next fenced) fenced {
			if old.Version != nil && next.Version != nil && (old.Epoch > next.Epoch || old.Epoch == next.Epoch && *old.Version > *next.Version) {
				return old
			}
			return next
		},
		Values: func(r fenced) []any { return []any{r.Ticker, r.Module, r.V, r.Epoch, r.Version, r.Note} },
	}
}

func orNULL(s *string) string {
	if s == nil {
		return "NULL"
	}
	return fmt.Sprintf("%q", *s)
}

// pathRun is the outcome of one batch on one path.
type pathRun struct {
	count int64
	rej   map[int]string
}

// comparePaths writes the batches gen returns, round after round, through
// a sink per write path, each on table (created by ddl in a schema of its
// own), and fails when the counts, the rejections (indexes and rules) or
// the tables' rows (as read returns them) differ. It returns the insert
// path's registry and the outcomes of the rounds.
func comparePaths[T any](t *testing.T, ddl string, table pgsink.Table[T], rounds int, gen func(round int) []T, read func(*testkit.Postgres) []string) (*prometheus.Registry, []pathRun) {
	t.Helper()
	srv := testkit.NewPostgresServer(t)
	ctx := testkit.Context(t)
	type sink struct {
		pg *testkit.Postgres
		s  *pgsink.Sink[T]
	}
	regs := map[string]*prometheus.Registry{}
	var sinks []sink
	for _, p := range writePaths() {
		pg := srv.Postgres(t)
		installCitext(t, ctx, pg.Pool)
		if _, err := pg.Pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
		regs[p.name] = prometheus.NewRegistry()
		s, err := pgsink.New(pg.Pool, table, p.opt, pgsink.WithRegisterer(regs[p.name], "test"))
		if err != nil {
			t.Fatal(err)
		}
		sinks = append(sinks, sink{pg, s})
	}
	var runs []pathRun
	for round := range rounds {
		batch := gen(round)
		var outs []pathRun
		for _, s := range sinks {
			n, err := s.s.WriteCount(ctx, batch)
			o := pathRun{count: n, rej: map[int]string{}}
			var rej *stages.Rejections
			switch {
			case errors.As(err, &rej):
				for _, it := range rej.Items {
					o.rej[it.Index] = it.Rule
				}
			case err != nil:
				t.Fatalf("round %d: %v", round, err)
			}
			outs = append(outs, o)
		}
		if fmt.Sprint(outs[0]) != fmt.Sprint(outs[1]) {
			t.Fatalf("round %d, batch %+v:\ncopy   %v\ninsert %v", round, batch, outs[0], outs[1])
		}
		if a, b := read(sinks[0].pg), read(sinks[1].pg); !slices.Equal(a, b) {
			t.Fatalf("round %d, batch %+v: tables differ\ncopy   %v\ninsert %v", round, batch, a, b)
		}
		runs = append(runs, outs[0])
	}
	for _, m := range []string{"sluice_pgsink_rows_written_total", "sluice_pgsink_rows_merged_total"} {
		if a, b := testkit.Metric(t, regs[copyPath], m), testkit.Metric(t, regs[insertPath], m); a != b {
			t.Errorf("%s: copy %v, insert %v", m, a, b)
		}
	}
	if v := testkit.Metric(t, regs[copyPath], "sluice_pgsink_attempts_total", "path", "insert"); v != 0 {
		t.Errorf("the copy path sent %v INSERT … VALUES", v)
	}
	if v := testkit.Metric(t, regs[insertPath], "sluice_pgsink_attempts_total", "path", "insert"); v == 0 {
		t.Error("the insert path sent no INSERT … VALUES")
	}
	return regs[insertPath], runs
}

// wantRules fails unless each of rules rejected a row on reg's sink.
func wantRules(t *testing.T, reg prometheus.Gatherer, rules ...string) {
	t.Helper()
	for _, rule := range rules {
		if testkit.Metric(t, reg, "sluice_pgsink_rows_rejected_total", "rule", rule) == 0 {
			t.Errorf("no row rejected by %s: the test does not exercise it", rule)
		}
	}
}

// The same batches written through both paths leave the same rows and
// report the same counts and rejections: a fenced table with a citext key
// (Where; rows refused by a CHECK, a NOT NULL column, a value the client
// cannot encode, also when the fence skips them), and the items table
// (no Where, a numeric(5,2) column, merged rows refused).
func TestSmallBatchMatchesCopy(t *testing.T) {
	t.Parallel()
	t.Run("fenced", func(t *testing.T) {
		t.Parallel()
		rnd := rand.New(rand.NewPCG(17, 5))
		tickers := []string{"nvda", "NVDA", "Nvda", "aapl", "AAPL", "msft", "tsla"}
		notes := []string{"", "a", "note"}
		var keys []int
		gen := func(int) []fenced {
			var batch []fenced
			distinct := map[string]bool{}
			for range 1 + rnd.IntN(12) {
				v := int64(1 + rnd.IntN(8))
				r := fenced{Ticker: tickers[rnd.IntN(len(tickers))], Module: []string{"flow", "pool"}[rnd.IntN(2)],
					V: int64(rnd.IntN(50)), Epoch: int64(1 + rnd.IntN(3)), Version: &v}
				switch rnd.IntN(16) {
				case 0:
					r.V = -1 // CHECK violation
				case 1:
					r.V = 1 << 40 // the client cannot encode it for int
				case 2:
					r.Version = nil // NOT NULL violation
				}
				if i := rnd.IntN(len(notes) + 1); i < len(notes) {
					r.Note = &notes[i]
				}
				batch = append(batch, r)
				distinct[fencedTable().KeyOf(r)] = true
			}
			keys = append(keys, len(distinct))
			return batch
		}
		read := func(pg *testkit.Postgres) []string {
			t.Helper()
			rows, err := pg.Pool.Query(testkit.Context(t), "SELECT ticker::text, module, v, epoch, version, note FROM fenced ORDER BY ticker, module")
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			var r fenced
			if _, err := pgx.ForEachRow(rows, []any{&r.Ticker, &r.Module, &r.V, &r.Epoch, &r.Version, &r.Note}, func() error {
				out = append(out, fmt.Sprintf("%s/%s v=%d %d.%d %s", r.Ticker, r.Module, r.V, r.Epoch, *r.Version, orNULL(r.Note)))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			return out
		}
		reg, runs := comparePaths(t, fencedDDL, fencedTable(), 80, gen, read)
		wantRules(t, reg, "pg.23514.fenced_v_check", "pg.encode", "pg.23502")
		// A batch without rejections changes every key's row (its
		// (epoch, version) differs) unless the fence skips it.
		fencedWrites := 0
		for i, r := range runs {
			if len(r.rej) == 0 && r.count < int64(keys[i]) {
				fencedWrites++
			}
		}
		if fencedWrites == 0 {
			t.Error("no write was fenced")
		}
	})
	t.Run("items", func(t *testing.T) {
		t.Parallel()
		rnd := rand.New(rand.NewPCG(3, 11))
		gen := func(int) []item {
			var batch []item
			for range 1 + rnd.IntN(12) {
				r := item{K: fmt.Sprintf("k%d", rnd.IntN(10)), V: float64(rnd.IntN(10000)) / 100, N: n32(int32(rnd.IntN(20)))}
				switch rnd.IntN(16) {
				case 0:
					r.V = -1 // CHECK violation
				case 1:
					r.V = 1000 // numeric(5,2) overflow
				case 2:
					r.N = nil // NOT NULL violation
				}
				if rnd.IntN(2) == 0 {
					r.Note = str(fmt.Sprint(rnd.IntN(3)))
				}
				batch = append(batch, r)
			}
			return batch
		}
		read := func(pg *testkit.Postgres) []string {
			var out []string
			for k, r := range readItems(t, testkit.Context(t), pg.Pool) {
				out = append(out, fmt.Sprintf("%s v=%v n=%d %s", k, r.V, r.N, orNULL(r.Note)))
			}
			slices.Sort(out)
			return out
		}
		reg, _ := comparePaths(t, itemsDDL, itemsTable("items"), 80, gen, read)
		wantRules(t, reg, "pg.23514.items_v_check", "pg.22003", "pg.23502")
	})
}
