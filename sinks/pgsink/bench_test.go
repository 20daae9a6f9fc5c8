package pgsink_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/sinks/pgsink"
)

var benchWords = strings.Fields(`thi truong chung khoan co phieu ngan hang tang truong loi nhuan quy
	von hoa doanh nghiep nha dau tu ngoai khoi ngoai ban rong mua rong thanh khoan phien giao dich
	vn-index dieu chinh ky vong lai suat ty gia xuat khau bat dong san thep dau khi ban le cong nghe`)

func benchText(r *rand.Rand, n int) *string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(benchWords[r.IntN(len(benchWords))])
		b.WriteByte(' ')
	}
	s := b.String()[:n]
	return &s
}

// benchArticles returns n sa_silver rows whose keys contain prefix, in
// random order. The keys and values depend only on r's state and prefix,
// except the content hash, which also depends on version.
func benchArticles(r *rand.Rand, prefix string, n, version int) []silver.SARow {
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make([]silver.SARow, n)
	for j, i := range r.Perm(n) {
		dom := fmt.Sprintf("news%d.example.vn", i%37)
		lang := "vi"
		raw, crowd := r.Float64(), r.Float64()
		w := i%2 == 0
		syms := make([]string, 1+r.IntN(3))
		for k := range syms {
			syms[k] = string([]byte{byte('A' + r.IntN(26)), byte('A' + r.IntN(26)), byte('A' + r.IntN(26))})
		}
		var tags []string
		if v := r.IntN(3); v > 0 {
			tags = []string{"market", "banking", "energy"}[:v]
		}
		pub := base.Add(time.Duration(r.IntN(365*24)) * time.Hour)
		out[j] = silver.SARow{
			URLCanonical:  fmt.Sprintf("https://%s/%s/bai-viet-%08d-%06x.html", dom, prefix, i, r.Uint32()&0xffffff),
			SourceDomain:  dom,
			PublisherTime: pub, FirstSeenTime: pub.Add(time.Minute),
			Language: &lang, Title: benchText(r, 70), TextNormalized: benchText(r, 300),
			ContentHash: fmt.Sprintf("%016x%d", r.Uint64(), version),
			Symbols:     syms, TopicTags: tags,
			HypeRaw: &raw, HypeCrowd: &crowd, AccountWeightsApplied: &w,
		}
		if i%5 == 0 {
			a := "tac gia " + strconv.Itoa(i%100)
			out[j].Author = &a
		}
	}
	return out
}

// backendCPU tracks the server processes of a pool's connections (the
// server must run on this machine) and sums their CPU time.
type backendCPU struct {
	mu   sync.Mutex
	pids []int32
}

func (c *backendCPU) afterConnect(ctx context.Context, conn *pgx.Conn) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pids = append(c.pids, int32(conn.PgConn().PID()))
	return nil
}

// total returns the CPU time of the tracked backends, or -1 when it cannot
// be read (remote server).
func (c *backendCPU) total() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum time.Duration
	for _, pid := range c.pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			return -1
		}
		ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
		if err != nil {
			return -1
		}
		sum += time.Duration(ns)
	}
	return sum
}

// BenchmarkWriteLarge writes 20k-row batches into sa_silver (the silver
// pipeline's table, created by its migrations) and reports wall time and server CPU per row (pg-ns/row: the
// CPU time of the pool's backends, read from /proc; reported only when
// PostgreSQL runs on this machine). Modes:
//
//   - new: every key is new (the table grows by a batch per iteration);
//   - existing: the same 20k keys with changed values (every row updated);
//   - mixed: half the keys exist (their values change), half are new;
//   - new-x6: 6 writers each writing 20k new keys at once.
//
// Strategies: direct is the sink (new keys COPYed into the table, the rest
// upserted); upsert sends every row through the staging table.
//
// -count repeats each sub-benchmark back to back; on a shared machine run
// the whole benchmark several times instead (-count 1) and compare medians:
//
//	go test -c -o /tmp/pgsink.test ./sinks/pgsink
//	for i in 1 2 3 4 5; do (cd sinks/pgsink && /tmp/pgsink.test -test.run '^$' \
//	    -test.bench WriteLarge -test.benchtime 3x); done
func BenchmarkWriteLarge(b *testing.B) {
	srv := testkit.NewPostgresServer(b)
	const rows = 20_000
	for _, m := range []writeBench{
		{mode: "new", rows: rows, writers: 1},
		{mode: "existing", rows: rows, old: rows, writers: 1},
		{mode: "mixed", rows: rows, old: rows / 2, writers: 1},
		{mode: "new-x6", rows: rows, writers: 6},
	} {
		for _, st := range benchStrategies {
			b.Run(m.mode+"/"+st.name, func(b *testing.B) { m.run(b, srv, st.upsertOnly) })
		}
	}
}

// BenchmarkWriteSmall is BenchmarkWriteLarge for 100-row batches, where
// the per-transaction costs show (statements, round trips, the staging
// table's creation and drop): all keys new, half of them new.
func BenchmarkWriteSmall(b *testing.B) {
	srv := testkit.NewPostgresServer(b)
	for _, m := range []writeBench{
		{mode: "new", rows: 100, writers: 1},
		{mode: "mixed", rows: 100, old: 50, writers: 1},
	} {
		for _, st := range benchStrategies {
			b.Run(m.mode+"/"+st.name, func(b *testing.B) { m.run(b, srv, st.upsertOnly) })
		}
	}
}

var benchStrategies = []struct {
	name       string
	upsertOnly bool
}{{"upsert", true}, {"direct", false}}

// writeBench writes batches of rows sa_silver rows, old of which exist (the same
// keys every iteration, with new values), from writers concurrent writers.
type writeBench struct {
	mode      string
	rows, old int
	writers   int
}

func (m writeBench) run(b *testing.B, srv *testkit.PostgresServer, upsertOnly bool) {
	pg := srv.Postgres(b)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pg.URL)
	if err != nil {
		b.Fatal(err)
	}
	var cpu backendCPU
	cfg.AfterConnect = cpu.afterConnect
	cfg.MaxConns = int32(m.writers) + 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		b.Fatal(err)
	}
	s, err := pgsink.New(pool, silver.SATable())
	if err != nil {
		b.Fatal(err)
	}
	pgsink.SetUpsertOnly(s, upsertOnly)
	oldRows := func(version int) []silver.SARow {
		return benchArticles(rand.New(rand.NewPCG(3, 4)), "old", m.old, version)
	}
	if m.old > 0 {
		if err := s.Write(ctx, oldRows(0)); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE sa_silver"); err != nil {
			b.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	var wall, server time.Duration
	serverOK := cpu.total() >= 0
	for i := 0; b.Loop(); i++ {
		batches := make([][]silver.SARow, m.writers)
		for w := range batches {
			batches[w] = benchArticles(r, fmt.Sprintf("i%dw%d", i, w), m.rows-m.old, 0)
			if m.old > 0 {
				batches[w] = append(batches[w], oldRows(i+1)...)
				r.Shuffle(m.rows, func(a, b int) { batches[w][a], batches[w][b] = batches[w][b], batches[w][a] })
			}
		}
		c0, t0 := cpu.total(), time.Now()
		var wg sync.WaitGroup
		errs := make([]error, m.writers)
		for w := range m.writers {
			wg.Go(func() { errs[w] = s.Write(ctx, batches[w]) })
		}
		wg.Wait()
		wall += time.Since(t0)
		if c1 := cpu.total(); c0 >= 0 && c1 >= 0 {
			server += c1 - c0
		} else {
			serverOK = false
		}
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	n := float64(b.N * m.writers * m.rows)
	b.ReportMetric(float64(wall.Nanoseconds())/n, "wall-ns/row")
	if serverOK {
		b.ReportMetric(float64(server.Nanoseconds())/n, "pg-ns/row")
	}
	var count int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM sa_silver").Scan(&count); err != nil {
		b.Fatal(err)
	}
	if want := m.old + b.N*m.writers*(m.rows-m.old); count != want {
		b.Fatalf("sa_silver has %d rows, want %d", count, want)
	}
}
