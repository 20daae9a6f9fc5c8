package silver

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
)

// migrated returns a fresh, migrated schema on srv.
func migrated(t testing.TB, srv *testkit.PostgresServer) (context.Context, *testkit.Postgres) {
	t.Helper()
	pg := srv.Postgres(t)
	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return ctx, pg
}

func newSink(t testing.TB, db pgsink.Beginner) stages.Sink[Row] {
	t.Helper()
	s, err := NewSink(db)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rowsOf runs envelopes through Decode and the stage (clock testNow).
func rowsOf(t testing.TB, values ...[]byte) []Row {
	t.Helper()
	out := make([]Row, 0, len(values))
	for i, v := range values {
		r, err := process(v, time.Time{})
		if err != nil {
			t.Fatalf("record %d: %v\n%s", i, err, v)
		}
		out = append(out, r)
	}
	return out
}

const taCols = `symbol, trade_date, open, high, low, close, volume, vwap, adj_close, currency,
	price_multiplier, source, first_seen_time, ingest_time, content_hash`

func readTA(t testing.TB, ctx context.Context, db *pgxpool.Pool) map[string]TARow {
	t.Helper()
	rows, err := db.Query(ctx, "SELECT "+taCols+" FROM ta_silver")
	if err != nil {
		t.Fatalf("read ta_silver: %v", err)
	}
	out := map[string]TARow{}
	for rows.Next() {
		var r TARow
		if err := rows.Scan(&r.Symbol, &r.TradeDate, &r.Open, &r.High, &r.Low, &r.Close, &r.Volume, &r.VWAP,
			&r.AdjClose, &r.Currency, &r.PriceMultiplier, &r.Source, &r.FirstSeenTime, &r.IngestTime, &r.ContentHash); err != nil {
			t.Fatalf("scan ta_silver: %v", err)
		}
		out[r.Key()] = normTA(r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

const saCols = `url_canonical, source_domain, publisher_time, first_seen_time, language, title,
	text_normalized, content_hash, symbols, author, topic_tags, hype_raw, hype_crowd, hype_elitist,
	account_weights_applied, ingest_time`

func readSA(t testing.TB, ctx context.Context, db *pgxpool.Pool) map[string]SARow {
	t.Helper()
	rows, err := db.Query(ctx, "SELECT "+saCols+" FROM sa_silver")
	if err != nil {
		t.Fatalf("read sa_silver: %v", err)
	}
	out := map[string]SARow{}
	for rows.Next() {
		var r SARow
		if err := rows.Scan(&r.URLCanonical, &r.SourceDomain, &r.PublisherTime, &r.FirstSeenTime, &r.Language,
			&r.Title, &r.TextNormalized, &r.ContentHash, &r.Symbols, &r.Author, &r.TopicTags, &r.HypeRaw,
			&r.HypeCrowd, &r.HypeElitist, &r.AccountWeightsApplied, &r.IngestTime); err != nil {
			t.Fatalf("scan sa_silver: %v", err)
		}
		out[r.Key()] = normSA(r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// normTA/normSA make rows comparable with reflect.DeepEqual: UTC times.
func normTA(r TARow) TARow {
	r.TradeDate = r.TradeDate.UTC()
	r.FirstSeenTime = r.FirstSeenTime.UTC()
	r.IngestTime = r.IngestTime.UTC()
	return r
}

func normSA(r SARow) SARow {
	r.PublisherTime = r.PublisherTime.UTC()
	r.FirstSeenTime = r.FirstSeenTime.UTC()
	r.IngestTime = r.IngestTime.UTC()
	return r
}

func withoutIngest[T any](m map[string]T, clear func(*T)) map[string]T {
	out := make(map[string]T, len(m))
	for k, v := range m {
		clear(&v)
		out[k] = v
	}
	return out
}

func clearTA(r *TARow) { r.IngestTime = time.Time{} }
func clearSA(r *SARow) { r.IngestTime = time.Time{} }

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestSinkPostgres(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)

	t.Run("ta sequence in one batch and across batches", func(t *testing.T) {
		t.Parallel()
		ctx, pg := migrated(t, srv)
		sink := newSink(t, pg.Pool)
		bar := func(over map[string]any) []byte {
			base := taBase()
			base["trade_date"] = "2025-05-30"
			return envelope(t, TaskTA, base, over, nil)
		}
		start := time.Now()
		// Batch 1: two records of one key, merged in memory.
		err := sink.Write(ctx, rowsOf(t,
			bar(map[string]any{"first_seen_time": "2025-05-30T10:00:00Z", "vwap": raw("10.5"), "source": "hose", "content_hash": "h1"}),
			bar(map[string]any{"first_seen_time": "2025-05-30T12:00:00Z", "open": raw("20"), "high": raw("22"), "low": raw("19"), "close": raw("21"), "volume": raw("2000"), "adj_close": raw("20.5")}),
		))
		if err != nil {
			t.Fatal(err)
		}
		want := TARow{Symbol: "VNM", TradeDate: at("2025-05-30T00:00:00Z"), Open: 20, High: 22, Low: 19, Close: 21,
			Volume: 2000, AdjClose: ptr(20.5), Currency: "VND", PriceMultiplier: 1, FirstSeenTime: at("2025-05-30T10:00:00Z")}
		checkTA := func(step string) TARow {
			t.Helper()
			got := readTA(t, ctx, pg.Pool)
			if len(got) != 1 {
				t.Fatalf("%s: %d rows", step, len(got))
			}
			r := got["VNM|2025-05-30"]
			if r.IngestTime.Before(start.Add(-time.Minute)) || r.IngestTime.After(time.Now().Add(time.Minute)) {
				t.Errorf("%s: ingest_time = %v", step, r.IngestTime)
			}
			ingest := r.IngestTime
			r.IngestTime = time.Time{}
			if !reflect.DeepEqual(r, want) {
				t.Errorf("%s: row =\n%+v\nwant\n%+v", step, r, want)
			}
			r.IngestTime = ingest
			return r
		}
		first := checkTA("batch 1")

		// Batch 2: an earlier first_seen and new values, NULLs included.
		err = sink.Write(ctx, rowsOf(t, bar(map[string]any{"first_seen_time": "2025-05-30T09:00:00Z", "open": raw("30"),
			"high": raw("31"), "low": raw("29"), "close": raw("30.5"), "volume": raw("3e3"), "currency": "USD",
			"price_multiplier": raw("1000"), "source": "hnx", "content_hash": "h3"})))
		if err != nil {
			t.Fatal(err)
		}
		want = TARow{Symbol: "VNM", TradeDate: at("2025-05-30T00:00:00Z"), Open: 30, High: 31, Low: 29, Close: 30.5,
			Volume: 3000, Currency: "USD", PriceMultiplier: 1000, Source: ptr("hnx"), ContentHash: ptr("h3"),
			FirstSeenTime: at("2025-05-30T09:00:00Z")}
		second := checkTA("batch 2")
		if !second.IngestTime.After(first.IngestTime) {
			t.Errorf("ingest_time did not move on a change: %v then %v", first.IngestTime, second.IngestTime)
		}

		// Batch 3: a later first_seen keeps the stored earliest.
		err = sink.Write(ctx, rowsOf(t, bar(map[string]any{"first_seen_time": "2025-05-30T11:00:00Z"})))
		if err != nil {
			t.Fatal(err)
		}
		want = TARow{Symbol: "VNM", TradeDate: at("2025-05-30T00:00:00Z"), Open: 10, High: 12, Low: 9, Close: 11,
			Volume: 1000, Currency: "VND", PriceMultiplier: 1, FirstSeenTime: at("2025-05-30T09:00:00Z")}
		checkTA("batch 3")
	})

	t.Run("sa sequence in one batch and across batches", func(t *testing.T) {
		t.Parallel()
		ctx, pg := migrated(t, srv)
		sink := newSink(t, pg.Pool)
		const u = "https://cafef.vn/tin-tuc/a.html"
		article := func(over map[string]any) []byte {
			base := map[string]any{"url_canonical": u, "source_domain": "cafef.vn", "text_normalized": strings.Repeat("ệ", 130)}
			return envelope(t, TaskSA, base, over, nil)
		}
		text := func(c string) *string { s := strings.Repeat(c, 130); return &s }
		check := func(step string, want SARow) {
			t.Helper()
			got := withoutIngest(readSA(t, ctx, pg.Pool), clearSA)
			if r := got[u]; !reflect.DeepEqual(r, want) {
				t.Errorf("%s: row =\n%+v\nwant\n%+v", step, r, want)
			}
		}
		// Batch 1: two records merged in memory.
		err := sink.Write(ctx, rowsOf(t,
			article(map[string]any{"publisher_time": "2025-05-30T10:00:00Z", "first_seen_time": "2025-05-30T10:05:00Z",
				"language": "vi", "title": "T1", "content_hash": "H1", "symbols": []string{"VNM"}}),
			article(map[string]any{"publisher_time": "2025-05-30T09:30:00Z", "first_seen_time": "2025-05-30T11:00:00Z",
				"language": "fr", "text_normalized": *text("a"), "content_hash": "H2", "symbols": []string{}, "author": "Au",
				"topic_tags": []string{"macro"}, "hype_raw": raw("1.5"), "account_weights_applied": false, "source_domain": "other.vn"}),
		))
		if err != nil {
			t.Fatal(err)
		}
		want := SARow{URLCanonical: u, SourceDomain: "cafef.vn", PublisherTime: at("2025-05-30T09:30:00Z"),
			FirstSeenTime: at("2025-05-30T10:05:00Z"), Language: ptr("vi"), Title: ptr("T1"), TextNormalized: text("a"),
			ContentHash: "H2", Symbols: []string{"VNM"}, Author: ptr("Au"), TopicTags: []string{"macro"},
			HypeRaw: ptr(1.5), AccountWeightsApplied: ptr(false)}
		check("batch 1", want)

		// Batch 2: earlier first_seen, a known language, empty tags, no symbols.
		err = sink.Write(ctx, rowsOf(t, article(map[string]any{"publisher_time": "2025-05-30T12:00:00Z",
			"first_seen_time": "2025-05-30T08:00:00Z", "language": "en", "title": "T3", "text_normalized": *text("b"),
			"content_hash": "H3", "topic_tags": []string{}, "hype_crowd": raw("2"), "source_domain": "x.vn"})))
		if err != nil {
			t.Fatal(err)
		}
		want.FirstSeenTime = at("2025-05-30T08:00:00Z")
		want.Language, want.Title, want.TextNormalized, want.ContentHash, want.HypeCrowd = ptr("en"), ptr("T3"), text("b"), "H3", ptr(2.0)
		check("batch 2", want)

		// Batch 3: an unknown language does not replace "en"; new symbols do.
		err = sink.Write(ctx, rowsOf(t, article(map[string]any{"publisher_time": "2025-05-30T12:00:00Z",
			"first_seen_time": "2025-05-30T12:00:00Z", "content_hash": "H4", "symbols": []string{"FPT", "HPG"},
			"account_weights_applied": true, "hype_elitist": raw("-0.5")})))
		if err != nil {
			t.Fatal(err)
		}
		want.ContentHash, want.Symbols, want.AccountWeightsApplied, want.HypeElitist = "H4", []string{"FPT", "HPG"}, ptr(true), ptr(-0.5)
		want.TextNormalized = text("ệ")
		check("batch 3", want)

		// A fresh row keeps the NULL / '{}' distinction of its arrays.
		const u2 = "https://cafef.vn/tin-tuc/b.html"
		err = sink.Write(ctx, rowsOf(t, envelope(t, TaskSA, saBase(), map[string]any{"url_canonical": u2, "symbols": []string{}, "language": absent}, nil)))
		if err != nil {
			t.Fatal(err)
		}
		r := readSA(t, ctx, pg.Pool)[u2]
		if r.Symbols == nil || len(r.Symbols) != 0 || r.TopicTags != nil || r.Language == nil || *r.Language != "unknown" || r.Title != nil {
			t.Errorf("fresh row = %+v", r)
		}
	})

	t.Run("sink state equals the in-memory merge of the corpus", func(t *testing.T) {
		t.Parallel()
		ctx, pg := migrated(t, srv)
		sink := newSink(t, pg.Pool)
		recs := GenerateCorpus(11, 6000, 0, CorpusKeys(600))
		stage := Stage()
		var rows []Row
		wantTA, wantSA := map[string]TARow{}, map[string]SARow{}
		for _, rec := range recs {
			env, err := Decode(nil, rec.Value)
			if err != nil {
				t.Fatal(err)
			}
			out, err := stage(ctx, stages.Msg[Envelope]{Value: env})
			if err != nil {
				t.Fatal(err)
			}
			r := out[0]
			rows = append(rows, r)
			switch {
			case r.TA != nil:
				if old, ok := wantTA[r.TA.Key()]; ok {
					wantTA[r.TA.Key()] = normTA(MergeTA(old, *r.TA))
				} else {
					wantTA[r.TA.Key()] = normTA(*r.TA)
				}
			case r.SA != nil:
				if old, ok := wantSA[r.SA.Key()]; ok {
					wantSA[r.SA.Key()] = normSA(MergeSA(old, *r.SA))
				} else {
					wantSA[r.SA.Key()] = normSA(*r.SA)
				}
			}
		}
		rng := rand.New(rand.NewPCG(3, 4))
		for len(rows) > 0 {
			n := min(len(rows), 1+rng.IntN(400))
			if err := sink.Write(ctx, rows[:n]); err != nil {
				t.Fatal(err)
			}
			rows = rows[n:]
		}
		gotTA := withoutIngest(readTA(t, ctx, pg.Pool), clearTA)
		gotSA := withoutIngest(readSA(t, ctx, pg.Pool), clearSA)
		if len(gotTA) != len(wantTA) || len(gotSA) != len(wantSA) {
			t.Fatalf("rows: ta %d want %d, sa %d want %d", len(gotTA), len(wantTA), len(gotSA), len(wantSA))
		}
		if len(wantTA) >= 3000 || len(wantSA) >= 3000 {
			t.Fatalf("corpus has too few repeated keys (ta %d, sa %d keys for 6000 records)", len(wantTA), len(wantSA))
		}
		for k, w := range wantTA {
			if g := gotTA[k]; !reflect.DeepEqual(g, w) {
				t.Fatalf("ta %s:\ngot  %+v\nwant %+v", k, g, w)
			}
		}
		for k, w := range wantSA {
			if g := gotSA[k]; !reflect.DeepEqual(g, w) {
				t.Fatalf("sa %s:\ngot  %+v\nwant %+v", k, g, w)
			}
		}
	})

	// 0001-01-01T00:00:00Z is Go's zero time but a valid RFC 3339 time that
	// passes the rules; in sa_silver's NOT NULL columns the upsert's LEAST
	// keeps it like any other time, so the in-memory merge must too.
	t.Run("sa times at the zero time merge like the upsert", func(t *testing.T) {
		t.Parallel()
		ctx, pg := migrated(t, srv)
		sink := newSink(t, pg.Pool)
		article := func(u, pub, fs string) []byte {
			return envelope(t, TaskSA, saBase(), map[string]any{"url_canonical": u, "publisher_time": pub, "first_seen_time": fs}, nil)
		}
		const inBatch, across = "https://a.vn/in-batch", "https://a.vn/across"
		const zero, pub, fs = "0001-01-01T00:00:00Z", "2025-05-30T10:00:00Z", "2025-05-30T10:05:00Z"
		if err := sink.Write(ctx, rowsOf(t, article(inBatch, zero, zero), article(inBatch, pub, fs), article(across, zero, zero))); err != nil {
			t.Fatal(err)
		}
		if err := sink.Write(ctx, rowsOf(t, article(across, pub, fs))); err != nil {
			t.Fatal(err)
		}
		// The coalescing window merges with the router's Merge.
		rows := rowsOf(t, article("https://a.vn/window", zero, zero), article("https://a.vn/window", pub, fs))
		m := newSink(t, pg.Pool).(*router).Merge(rows[0], rows[1])
		got := readSA(t, ctx, pg.Pool)
		for _, c := range []struct {
			name    string
			pub, fs time.Time
		}{
			{"merged in one batch", got[inBatch].PublisherTime, got[inBatch].FirstSeenTime},
			{"upserted across batches", got[across].PublisherTime, got[across].FirstSeenTime},
			{"merged in a window", m.SA.PublisherTime, m.SA.FirstSeenTime},
		} {
			if !c.pub.IsZero() || !c.fs.IsZero() {
				t.Errorf("%s: publisher_time %v, first_seen_time %v; want both %s", c.name, c.pub, c.fs, zero)
			}
		}
	})

	t.Run("a refused row is rejected by its batch index and the rest lands", func(t *testing.T) {
		t.Parallel()
		ctx, pg := migrated(t, srv)
		sink := newSink(t, pg.Pool)
		ta := func(sym string, over map[string]any) []byte {
			o := map[string]any{"symbol": sym}
			for k, v := range over {
				o[k] = v
			}
			return envelope(t, TaskTA, taBase(), o, nil)
		}
		sa := func(u string, over map[string]any) []byte {
			o := map[string]any{"url_canonical": u}
			for k, v := range over {
				o[k] = v
			}
			return envelope(t, TaskSA, saBase(), o, nil)
		}
		// PostgreSQL text cannot hold NUL: SQLSTATE 22021, a permanent
		// rejection that no silver rule can see.
		batch := rowsOf(t,
			ta("AAA", nil),
			sa("https://a.vn/1", nil),
			sa("https://a.vn/2", map[string]any{"title": "bad\u0000title"}),
			ta("BBB", nil),
			ta("CCC", map[string]any{"source": "h\u0000se"}),
			sa("https://a.vn/3", nil),
			ta("DDD", nil),
		)
		batch = append(batch, Row{})
		err := sink.Write(ctx, batch)
		var rej *stages.Rejections
		if !errors.As(err, &rej) {
			t.Fatalf("want rejections, got %v", err)
		}
		got := map[int]string{}
		for _, r := range rej.Items {
			got[r.Index] = r.Rule
		}
		if want := map[int]string{2: "pg.22021", 4: "pg.22021", 7: "silver.empty_row"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("rejections = %v, want %v (%v)", got, want, err)
		}
		tas, sas := readTA(t, ctx, pg.Pool), readSA(t, ctx, pg.Pool)
		for _, k := range []string{"AAA|2025-06-02", "BBB|2025-06-02", "DDD|2025-06-02"} {
			if _, ok := tas[k]; !ok {
				t.Errorf("ta %s missing", k)
			}
		}
		for _, k := range []string{"https://a.vn/1", "https://a.vn/3"} {
			if _, ok := sas[k]; !ok {
				t.Errorf("sa %s missing", k)
			}
		}
		if len(tas) != 3 || len(sas) != 2 {
			t.Errorf("landed ta %d, sa %d; want 3, 2", len(tas), len(sas))
		}
	})

	t.Run("redelivering a batch changes nothing", func(t *testing.T) {
		t.Parallel()
		ctx, pg := migrated(t, srv)
		sink := newSink(t, pg.Pool)
		var rows []Row
		for _, rec := range GenerateCorpus(5, 400, 0, CorpusKeys(60)) {
			env, err := Decode(nil, rec.Value)
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewValidator().Transform(env, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, r)
		}
		if err := sink.Write(ctx, rows); err != nil {
			t.Fatal(err)
		}
		snapshot := func() string {
			var s string
			err := pg.Pool.QueryRow(ctx, `SELECT
				(SELECT string_agg(format('%s|%s|%s', t::text, t.xmin, t.ingest_time), ',' ORDER BY symbol, trade_date) FROM ta_silver t) ||
				(SELECT string_agg(format('%s|%s|%s', s::text, s.xmin, s.ingest_time), ',' ORDER BY url_canonical) FROM sa_silver s)`).Scan(&s)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		before := snapshot()
		if err := sink.Write(ctx, rows); err != nil {
			t.Fatal(err)
		}
		if err := sink.Write(ctx, rows[len(rows)/2:]); err != nil {
			t.Fatal(err)
		}
		if after := snapshot(); after != before {
			t.Errorf("redelivery changed the tables")
		}
	})

	t.Run("transient errors fail the whole batch", func(t *testing.T) {
		t.Parallel()
		ctx := testkit.Context(t)
		dead, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
		if err != nil {
			t.Fatal(err)
		}
		defer dead.Close()
		sink := newSink(t, dead)
		err = sink.Write(ctx, rowsOf(t, envelope(t, TaskTA, taBase(), nil, nil), envelope(t, TaskSA, saBase(), nil, nil)))
		var rej *stages.Rejections
		if err == nil || errors.As(err, &rej) || !pgsink.IsTransient(err) {
			t.Fatalf("got %v (transient %v)", err, pgsink.IsTransient(err))
		}
		if c := stages.Classify(err); c.Kind != stages.KindRetry {
			t.Errorf("classified %v, want retry", c.Kind)
		}
	})
}

// failDB fails every Begin; a sink on it must never need it for an empty
// batch.
type failDB struct{}

func (failDB) Begin(context.Context) (pgx.Tx, error) { return nil, errors.New("no database") }

func TestRouterEmptyRows(t *testing.T) {
	t.Parallel()
	s := newSink(t, failDB{})
	err := s.Write(context.Background(), []Row{{}, {}})
	var rej *stages.Rejections
	if !errors.As(err, &rej) || len(rej.Items) != 2 || rej.Items[0].Index != 0 || rej.Items[1].Index != 1 || rej.Items[0].Rule != "silver.empty_row" {
		t.Fatalf("got %v", err)
	}
	if err := s.Write(context.Background(), nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}

// BenchmarkSinkWrite upserts batches of 1,000 mixed ta/sa rows (generated by
// the corpus, about three records per key, so both inserts and merging
// updates happen) into a migrated schema.
func BenchmarkSinkWrite(b *testing.B) {
	srv := testkit.NewPostgresServer(b)
	ctx, pg := migrated(b, srv)
	sink := newSink(b, pg.Pool)
	const batch = 1000
	const pool = 200 * batch
	c := NewCorpus(99, 0, CorpusKeys(pool/6))
	v := NewValidator()
	rows := make([]Row, 0, pool)
	for len(rows) < pool {
		env, err := Decode(nil, c.Next().Value)
		if err != nil {
			b.Fatal(err)
		}
		r, err := v.Transform(env, time.Time{})
		if err != nil {
			b.Fatal(err)
		}
		rows = append(rows, r)
	}
	b.ResetTimer()
	start := time.Now()
	i := 0
	for b.Loop() {
		off := (i * batch) % pool
		i++
		if err := sink.Write(ctx, rows[off:off+batch]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(i*batch)/time.Since(start).Seconds(), "rows/s")
}
