package pgsink

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
)

// article is a row shaped like sa_silver (pipelines/silver): a text key,
// several text columns (one of ~300 characters), timestamps, two text[]
// columns, floats and a boolean.
type article struct {
	URL, Domain      string
	Published, Seen  time.Time
	Language, Title  *string
	Text             *string
	Hash             string
	Symbols, Tags    []string
	Author           *string
	Raw, Crowd, Elit *float64
	Weights          *bool
}

// articlesDDL is sa_silver's DDL (schemas/migrations/00001_silver.sql).
const articlesDDL = `CREATE TABLE articles (
    url_canonical           TEXT        UNIQUE NOT NULL,
    source_domain           TEXT        NOT NULL,
    publisher_time          TIMESTAMPTZ NOT NULL,
    first_seen_time         TIMESTAMPTZ NOT NULL,
    language                TEXT,
    title                   TEXT,
    text_normalized         TEXT,
    content_hash            TEXT        NOT NULL,
    symbols                 TEXT[],
    author                  TEXT,
    topic_tags              TEXT[],
    hype_raw                DOUBLE PRECISION,
    hype_crowd              DOUBLE PRECISION,
    hype_elitist            DOUBLE PRECISION,
    account_weights_applied BOOLEAN,
    ingest_time             TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (url_canonical)
);
CREATE INDEX articles_pub ON articles (publisher_time);
CREATE INDEX articles_symbols ON articles USING GIN (symbols);
CREATE INDEX articles_hash_fallback ON articles (source_domain, content_hash)`

// articlesTable has sa_silver's update rules (pipelines/silver.SATable).
func articlesTable() Table[article] {
	keepUnlessEmpty := func(col string) string {
		return fmt.Sprintf("CASE WHEN array_length(EXCLUDED.%[1]s, 1) IS NOT NULL THEN EXCLUDED.%[1]s ELSE t.%[1]s END", col)
	}
	coalesce := func(col string) string { return fmt.Sprintf("COALESCE(EXCLUDED.%[1]s, t.%[1]s)", col) }
	return Table[article]{
		Name: "articles",
		Columns: []string{"url_canonical", "source_domain", "publisher_time", "first_seen_time", "language",
			"title", "text_normalized", "content_hash", "symbols", "author", "topic_tags", "hype_raw",
			"hype_crowd", "hype_elitist", "account_weights_applied"},
		Key: []string{"url_canonical"},
		Update: []Set{
			{Column: "publisher_time", Expr: "LEAST(t.publisher_time, EXCLUDED.publisher_time)"},
			{Column: "first_seen_time", Expr: "LEAST(t.first_seen_time, EXCLUDED.first_seen_time)"},
			{Column: "language", Expr: "CASE WHEN EXCLUDED.language IS NULL OR (EXCLUDED.language = 'unknown' AND t.language IS NOT NULL) THEN t.language ELSE EXCLUDED.language END"},
			{Column: "title", Expr: coalesce("title")},
			{Column: "text_normalized", Expr: coalesce("text_normalized")},
			{Column: "author", Expr: coalesce("author")},
			{Column: "symbols", Expr: keepUnlessEmpty("symbols")},
			{Column: "topic_tags", Expr: keepUnlessEmpty("topic_tags")},
			{Column: "hype_raw", Expr: coalesce("hype_raw")},
			{Column: "hype_crowd", Expr: coalesce("hype_crowd")},
			{Column: "hype_elitist", Expr: coalesce("hype_elitist")},
			{Column: "account_weights_applied", Expr: coalesce("account_weights_applied")},
			{Column: "content_hash", Expr: "EXCLUDED.content_hash"},
		},
		Touch: []string{"ingest_time"},
		KeyOf: func(a article) string { return a.URL },
		Values: func(a article) []any {
			var syms, tags any
			if a.Symbols != nil {
				syms = a.Symbols
			}
			if a.Tags != nil {
				tags = a.Tags
			}
			return []any{a.URL, a.Domain, a.Published, a.Seen, a.Language, a.Title, a.Text, a.Hash,
				syms, a.Author, tags, a.Raw, a.Crowd, a.Elit, a.Weights}
		},
	}
}

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

// benchArticles returns n articles whose keys contain prefix, in random
// order. The keys and values depend only on r's state and prefix, except
// the content hash, which also depends on version.
func benchArticles(r *rand.Rand, prefix string, n, version int) []article {
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make([]article, n)
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
		out[j] = article{
			URL:       fmt.Sprintf("https://%s/%s/bai-viet-%08d-%06x.html", dom, prefix, i, r.Uint32()&0xffffff),
			Domain:    dom,
			Published: pub, Seen: pub.Add(time.Minute),
			Language: &lang, Title: benchText(r, 70), Text: benchText(r, 300),
			Hash:    fmt.Sprintf("%016x%d", r.Uint64(), version),
			Symbols: syms, Tags: tags,
			Raw: &raw, Crowd: &crowd, Weights: &w,
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

// BenchmarkWriteLarge writes 20k-row batches into a table shaped like
// sa_silver and reports wall time and server CPU per row (pg-ns/row: the
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

// writeBench writes batches of rows articles, old of which exist (the same
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
	if _, err := pool.Exec(ctx, articlesDDL); err != nil {
		b.Fatal(err)
	}
	s, err := New(pool, articlesTable())
	if err != nil {
		b.Fatal(err)
	}
	s.upsertOnly = upsertOnly
	oldRows := func(version int) []article {
		return benchArticles(rand.New(rand.NewPCG(3, 4)), "old", m.old, version)
	}
	if m.old > 0 {
		if err := s.Write(ctx, oldRows(0)); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE articles"); err != nil {
			b.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	var wall, server time.Duration
	serverOK := cpu.total() >= 0
	for i := 0; b.Loop(); i++ {
		batches := make([][]article, m.writers)
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
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM articles").Scan(&count); err != nil {
		b.Fatal(err)
	}
	if want := m.old + b.N*m.writers*(m.rows-m.old); count != want {
		b.Fatalf("articles has %d rows, want %d", count, want)
	}
}
