package pgsink_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/pgsink"
)

// wide is a row with a column of every type the Append functions encode.
type wide struct {
	K    string
	D    time.Time
	F    float64
	I    int64
	T    *string
	FP   *float64
	TS   time.Time
	Arr  []string
	B    *bool
	Note string
}

const wideDDL = `CREATE TABLE %s (k text PRIMARY KEY, d date NOT NULL, f float8 NOT NULL, i int8 NOT NULL,
	t text, fp float8, ts timestamptz, arr text[], b boolean, note text NOT NULL)`

func wideTable(name string, binary bool) pgsink.Table[wide] {
	tb := pgsink.Table[wide]{
		Name:    name,
		Columns: []string{"k", "d", "f", "i", "t", "fp", "ts", "arr", "b", "note"},
		Key:     []string{"k"},
		Update: []pgsink.Set{{Column: "f", Expr: "EXCLUDED.f"}, {Column: "t", Expr: "EXCLUDED.t"},
			{Column: "arr", Expr: "EXCLUDED.arr"}, {Column: "note", Expr: "EXCLUDED.note"}},
		KeyOf: func(r wide) string { return r.K },
		Values: func(r wide) []any {
			var arr any
			if r.Arr != nil {
				arr = r.Arr
			}
			var ts any
			if !r.TS.IsZero() {
				ts = r.TS
			}
			return []any{r.K, r.D, r.F, r.I, r.T, r.FP, ts, arr, r.B, r.Note}
		},
	}
	if binary {
		tb.KeyValues = func(r wide) []any { return []any{r.K} }
		tb.AppendCopy = func(b []byte, r wide) []byte { return appendWide(b, r, pgsink.AppendDate) }
	}
	return tb
}

// appendWide encodes r for a binary COPY, its date column with date.
func appendWide(b []byte, r wide, date func([]byte, time.Time) []byte) []byte {
	b = pgsink.AppendText(b, r.K)
	b = date(b, r.D)
	b = pgsink.AppendFloat8(b, r.F)
	b = pgsink.AppendInt8(b, r.I)
	b = pgsink.AppendTextPtr(b, r.T)
	b = pgsink.AppendFloat8Ptr(b, r.FP)
	if r.TS.IsZero() {
		b = pgsink.AppendNull(b)
	} else {
		b = pgsink.AppendTimestamptz(b, r.TS)
	}
	b = pgsink.AppendTextArray(b, r.Arr)
	b = pgsink.AppendBoolPtr(b, r.B)
	return pgsink.AppendText(b, r.Note)
}

// wideRows returns n rows of version v covering the values the encodings
// must agree on: NULLs, empty and non-empty arrays, dates in other zones,
// sub-microsecond and pre-2000 times, negative and special floats.
func wideRows(n, v int) []wide {
	hcm := time.FixedZone("ICT", 7*3600)
	neg := time.FixedZone("NEG", -10*3600)
	var out []wide
	for i := range n {
		s := fmt.Sprintf("text %d/%d é 漢", i, v)
		f := float64(i) * -1.25
		b := i%3 == 0
		r := wide{
			K:    fmt.Sprintf("k%04d", i),
			D:    time.Date(1990+i%40, time.Month(1+i%12), 1+i%28, 23*(i%2), 0, 0, 0, []*time.Location{time.UTC, hcm, neg}[i%3]),
			F:    []float64{f, math.Inf(1), math.Inf(-1), math.MaxFloat64, math.SmallestNonzeroFloat64, 0}[i%6],
			I:    int64(i)*1_000_000_007 - 5e12,
			TS:   time.Date(1970+i%60, 3, 4, 5, 6, 7, i*999_999_937%1_000_000_000, []*time.Location{time.UTC, hcm, neg}[(i+1)%3]),
			Note: strings.Repeat("n", i%50) + fmt.Sprint(v),
		}
		if i%4 != 0 {
			r.T, r.FP = &s, &f
		}
		if i%5 != 0 {
			r.B = &b
		}
		switch i % 3 {
		case 1:
			r.Arr = []string{}
		case 2:
			r.Arr = []string{"a", "", fmt.Sprint(i, v), "with \"quotes\" and {braces}"}
		}
		if i%7 == 0 {
			r.TS = time.Time{}
		}
		out = append(out, r)
	}
	return out
}

func dumpTable(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name string) []string {
	t.Helper()
	rows, err := pool.Query(ctx, fmt.Sprintf("SELECT ROW(k, d, f, i, t, fp, ts, arr, b, note)::text FROM %s ORDER BY k", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A table with AppendCopy (binary COPY) stores exactly what the same rows
// encoded by pgx from Values store, whether they are inserted by the direct
// COPY (new keys) or upserted through the staging table (existing keys).
func TestBinaryCopyStoresWhatValuesStore(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	pg := srv.Postgres(t)
	ctx := testkit.Context(t)
	for _, name := range []string{"by_values", "by_binary"} {
		if _, err := pg.Pool.Exec(ctx, fmt.Sprintf(wideDDL, name)); err != nil {
			t.Fatal(err)
		}
	}
	byValues, err := pgsink.New(pg.Pool, wideTable("by_values", false))
	if err != nil {
		t.Fatal(err)
	}
	byBinary, err := pgsink.New(pg.Pool, wideTable("by_binary", true))
	if err != nil {
		t.Fatal(err)
	}
	// 400 new keys (direct COPY), then 200 of them again with another
	// version and 200 new (the upsert of existing keys), then one large
	// batch of existing keys (more than one COPY chunk).
	for _, batch := range [][]wide{wideRows(400, 1), wideRows(600, 2)[200:], wideRows(600, 3)} {
		for _, s := range []*pgsink.Sink[wide]{byValues, byBinary} {
			n, err := s.WriteCount(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(batch)) {
				t.Fatalf("%d rows written, want %d", n, len(batch))
			}
		}
		want, got := dumpTable(t, ctx, pg.Pool, "by_values"), dumpTable(t, ctx, pg.Pool, "by_binary")
		if len(want) == 0 || !slices.Equal(got, want) {
			for i := range min(len(got), len(want)) {
				if got[i] != want[i] {
					t.Fatalf("binary COPY stored %s, pgx's encoding of Values %s (%d rows, want %d)", got[i], want[i], len(got), len(want))
				}
			}
			t.Fatalf("binary COPY stored %d rows, pgx's encoding of Values %d", len(got), len(want))
		}
	}
}

// A binary encoding that does not match a column's type is refused by the
// server as a row error: the row is rejected (22P03), the others written.
func TestBinaryCopyMismatchRejectsTheRow(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	pg := srv.Postgres(t)
	ctx := testkit.Context(t)
	if _, err := pg.Pool.Exec(ctx, fmt.Sprintf(wideDDL, "mismatch")); err != nil {
		t.Fatal(err)
	}
	tb := wideTable("mismatch", true)
	tb.AppendCopy = func(b []byte, r wide) []byte {
		return appendWide(b, r, func(b []byte, d time.Time) []byte {
			if r.K == "k0003" {
				return pgsink.AppendInt8(b, 1) // 8 bytes for a 4-byte date
			}
			return pgsink.AppendDate(b, d)
		})
	}
	s, err := pgsink.New(pg.Pool, tb)
	if err != nil {
		t.Fatal(err)
	}
	rows := wideRows(10, 1)
	err = s.Write(ctx, rows)
	wantRejections(t, err, map[int]string{3: "pg.22P03"})
	if got := dumpTable(t, ctx, pg.Pool, "mismatch"); len(got) != 9 {
		t.Fatalf("%d rows stored, want the 9 others", len(got))
	}
}
