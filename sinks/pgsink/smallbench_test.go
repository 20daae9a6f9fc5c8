package pgsink_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/modules"
	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/sinks/pgsink"
)

// BenchmarkSmallBatch compares the two write paths (insert: one INSERT …
// VALUES; copy: COPY, directly or through the staging table) on batches of
// 1 to 256 rows, the sizes at which DefaultSmallBatch is chosen, in the
// tables made by the migrations:
//
//   - mirror: ticker_data_modules as the modules mirror writes it
//     (modules.MirrorTable: a citext key, the (epoch, version) fence as
//     Table.Where, so COPY goes through the staging table), every row a
//     newer state of an existing key;
//   - sa_silver-new: sa_silver (silver.SATable), every key new (COPY
//     goes straight into the table after a lookup of the keys);
//   - sa_silver-existing: sa_silver, every key existing with a new
//     content hash (COPY goes through the staging table after the lookup).
//
// Reported: wall time per batch (ns/op) and per row. On a shared machine
// run the binary several times and compare medians (sub-benchmarks then
// interleave):
//
//	go test -c -o /tmp/pgsink.test ./sinks/pgsink
//	for i in 1 2 3 4 5 6; do (cd sinks/pgsink && /tmp/pgsink.test -test.run '^$' \
//	    -test.bench SmallBatch -test.benchtime 300x); done
func BenchmarkSmallBatch(b *testing.B) {
	srv := testkit.NewPostgresServer(b)
	ctx := context.Background()
	pg := srv.Postgres(b)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, pg.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	// Keys are unique per run of a sub-benchmark (the testing package runs
	// each more than once).
	runs := 0
	prefix := func(path string, rows int) string {
		runs++
		return fmt.Sprintf("%s%dr%d", path[:1], rows, runs)
	}
	for _, rows := range []int{1, 4, 16, 32, 64, 256} {
		for _, p := range writePaths() {
			name := fmt.Sprintf("rows=%d/%s", rows, p.name)
			b.Run("mirror/"+name, func(b *testing.B) {
				s, err := pgsink.New(pool, modules.MirrorTable(), p.opt)
				if err != nil {
					b.Fatal(err)
				}
				keys := prefix(p.name, rows)
				benchWrites(b, s, rows, func(i int) []modules.State { return mirrorStates(keys, rows, int64(i)+2) },
					mirrorStates(keys, rows, 1))
			})
			b.Run("sa_silver-new/"+name, func(b *testing.B) {
				s, err := pgsink.New(pool, silver.SATable(), p.opt)
				if err != nil {
					b.Fatal(err)
				}
				r := rand.New(rand.NewPCG(uint64(rows), 1))
				keys := prefix(p.name, rows)
				benchWrites(b, s, rows, func(i int) []silver.SARow { return benchArticles(r, fmt.Sprintf("%s-%d", keys, i), rows, 0) }, nil)
			})
			b.Run("sa_silver-existing/"+name, func(b *testing.B) {
				s, err := pgsink.New(pool, silver.SATable(), p.opt)
				if err != nil {
					b.Fatal(err)
				}
				keys := prefix(p.name, rows)
				same := func(version int) []silver.SARow {
					return benchArticles(rand.New(rand.NewPCG(uint64(rows), 2)), keys, rows, version)
				}
				benchWrites(b, s, rows, func(i int) []silver.SARow { return same(i + 1) }, same(0))
			})
		}
	}
}

// benchWrites writes first (when not nil), then batch(i) per iteration,
// timing the writes only.
func benchWrites[T any](b *testing.B, s *pgsink.Sink[T], rows int, batch func(i int) []T, first []T) {
	ctx := context.Background()
	if first != nil {
		if err := s.Write(ctx, first); err != nil {
			b.Fatal(err)
		}
	}
	var wall time.Duration
	for i := 0; b.Loop(); i++ {
		bt := batch(i)
		t0 := time.Now()
		if err := s.Write(ctx, bt); err != nil {
			b.Fatal(err)
		}
		wall += time.Since(t0)
	}
	b.ReportMetric(float64(wall.Nanoseconds())/float64(b.N), "write-ns/op")
	b.ReportMetric(float64(wall.Nanoseconds())/float64(b.N*rows), "write-ns/row")
}

// mirrorStates returns n ready states of distinct keys, all of version
// version.
func mirrorStates(prefix string, n int, version int64) []modules.State {
	mods := []string{"options_flow", "short_interest", "dark_pool", "price_action"}
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC).Add(time.Duration(version) * time.Second)
	exp := now.Add(time.Hour)
	out := make([]modules.State, n)
	for i := range out {
		out[i] = modules.State{
			Ticker: fmt.Sprintf("%s%04d", prefix, i/len(mods)), Module: mods[i%len(mods)], Status: modules.StatusReady,
			FetchedAt: &now, ExpiresAt: &exp, InputHash: fmt.Sprintf("%016x", version*7919+int64(i)),
			Epoch: 1, Version: version, UpdatedAt: now,
		}
	}
	return out
}
