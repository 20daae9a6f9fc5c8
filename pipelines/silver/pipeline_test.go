package silver_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/groupctl"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// TestMain lets the test binary act as a silver group member in a child
// process (so that a member can be killed with SIGKILL).
func TestMain(m *testing.M) {
	if os.Getenv("SILVER_MEMBER") == "1" {
		os.Exit(member())
	}
	os.Exit(testkit.MainWithPostgres(m)) // one local PostgreSQL for the binary when DATABASE_URL is unset
}

// member runs silver.Services from the SILVER_* environment until SIGTERM.
func member() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("SILVER_DB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	batch, _ := strconv.Atoi(os.Getenv("SILVER_BATCH"))
	windowKeys, _ := strconv.Atoi(os.Getenv("SILVER_WINDOW_KEYS"))
	// SILVER_SLOW slows the validator's clock, read about once per valid
	// record, so that a member is still busy when the test kills it.
	slow, _ := time.ParseDuration(os.Getenv("SILVER_SLOW"))
	clock := func() time.Time { time.Sleep(slow); return time.Now() }
	env := pipelines.Env{
		Kafka:      []kgo.Opt{kgo.SeedBrokers(strings.Split(os.Getenv("SILVER_BROKERS"), ",")...)},
		DB:         pool,
		Registerer: prometheus.NewRegistry(),
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	svcs, err := silver.Services(env, silver.Config{
		Group: os.Getenv("SILVER_GROUP"), Topic: os.Getenv("SILVER_TOPIC"), DLQTopic: os.Getenv("SILVER_DLQ"),
		FlagsTopic: os.Getenv("SILVER_FLAGS"), BacklogInterval: 200 * time.Millisecond, Clock: clock,
		Runtime: run.Config{BatchMaxRecords: batch, BatchLinger: 5 * time.Millisecond, CommitInterval: 100 * time.Millisecond,
			Window: run.WindowConfig{MaxKeys: windowKeys}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	errc := make(chan error, len(svcs))
	for _, s := range svcs {
		go func() { errc <- s.Run(ctx) }()
	}
	for range svcs {
		if err := <-errc; err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

type world struct {
	t                        *testing.T
	k                        *testkit.Kafka
	pg                       *testkit.Postgres
	group, topic, dlq, flags string
}

// startMember starts a member process with batches of batch records;
// extra are more SILVER_* settings (SILVER_WINDOW_KEYS, SILVER_SLOW).
func (w *world) startMember(batch int, extra ...string) *exec.Cmd {
	w.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), extra...), "SILVER_MEMBER=1",
		"SILVER_DB="+w.pg.URL, "SILVER_BROKERS="+strings.Join(w.k.Brokers, ","), "SILVER_GROUP="+w.group,
		"SILVER_TOPIC="+w.topic, "SILVER_DLQ="+w.dlq, "SILVER_FLAGS="+w.flags, "SILVER_BATCH="+strconv.Itoa(batch))
	cmd.Stderr = testWriter{w.t}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("member: %s", strings.TrimSpace(string(p)))
	return len(p), nil
}

func count(t *testing.T, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// The integration test of the silver pipeline (issue 4): a mixed corpus ends
// as exactly the rows the rules say and the DLQ records they say; two member
// processes split the partitions; one is SIGKILLed mid-run and nothing is
// lost; a replay from the earliest offset leaves both tables unchanged.
func TestSilverPipelineEndToEnd(t *testing.T) {
	k := testkit.NewKafka(t, testkit.FakeOK())
	if !k.Real {
		t.Logf("running on kfake (set KAFKA_BROKERS for the real-broker run); the member processes reach it over TCP")
	}
	pg := testkit.NewPostgres(t)
	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, k: k, pg: pg, group: testkit.Name(t, "silver"),
		topic: k.Topic(t, "bronze", 6), dlq: k.Topic(t, "bronze_dlq", 2), flags: k.Topic(t, "flags", 1)}

	corpus := silver.GenerateCorpus(7, 6000, 0.1)
	// Records that pass every rule but that PostgreSQL refuses (text cannot
	// hold NUL, SQLSTATE 22021): the window's write rejects their rows, and
	// the runtime reads them back from their partitions to dead-letter them.
	for i, field := range []string{"title", "author", "title"} {
		url := fmt.Sprintf("https://nul.example/%d", i)
		corpus = slices.Insert(corpus, 1000+2000*i, silver.Record{
			Key: url, WantReason: stages.ReasonSinkRejected, WantRule: "pg.22021",
			Value: []byte(`{"task_type":"sa.article","payload":{"url_canonical":"` + url + `","source_domain":"nul.example",` +
				`"publisher_time":"2025-06-01T00:00:00Z","first_seen_time":"2025-06-01T01:00:00Z","content_hash":"h",` +
				`"text_normalized":"` + strings.Repeat("x", 130) + `","` + field + `":"bad\u0000value"}}`),
		})
	}
	n := len(corpus)
	cl := k.Client(t)
	recs := make([]*kgo.Record, n)
	for i, c := range corpus {
		recs[i] = &kgo.Record{Topic: w.topic, Key: []byte(c.Key), Value: c.Value}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	wantTA, wantSA, wantDLQ := expected(t, corpus, recs)

	// Two members; the first is killed with SIGKILL once both share the group.
	// They are slowed down (5 ms per valid record, so a partition takes
	// seconds) and close their coalescing windows every 20 keys, so that the
	// first one has written part of its partitions, not all, when it dies.
	slow := []string{"SILVER_SLOW=5ms", "SILVER_WINDOW_KEYS=20"}
	a := w.startMember(25, slow...)
	total := func() int {
		return count(t, pg.Pool, "SELECT (SELECT count(*) FROM ta_silver) + (SELECT count(*) FROM sa_silver)")
	}
	testkit.WaitFor(t, 60*time.Second, "member A to land rows", func() bool { return total() > 0 })
	b := w.startMember(25, slow...)
	adm := k.Admin(t)
	testkit.WaitFor(t, 60*time.Second, "both members to own partitions", func() bool {
		gs, err := adm.DescribeGroups(ctx, w.group)
		if err != nil {
			return false
		}
		g := gs[w.group]
		if len(g.Members) != 2 {
			return false
		}
		for _, m := range g.Members {
			if ca, ok := m.Assigned.AsConsumer(); !ok || len(ca.Topics) == 0 || len(ca.Topics[0].Partitions) == 0 {
				return false
			}
		}
		return true
	})
	landedBeforeKill := total()
	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = a.Process.Wait()
	t.Logf("killed member A with %d rows landed", landedBeforeKill)
	if landedBeforeKill >= len(wantTA)+len(wantSA) {
		t.Fatalf("member A had landed every row (%d) before it was killed: the kill tested nothing", landedBeforeKill)
	}

	testkit.WaitFor(t, 120*time.Second, "member B to finish every partition", func() bool {
		lag, err := groupctl.Lag(ctx, adm, w.group)
		g, ok := lag.Group(w.group)
		return err == nil && ok && g.Err == nil && g.Total == 0 && len(g.Partitions) == 6
	})
	checkRows(t, pg.Pool, wantTA, wantSA)
	checkDLQ(t, k, w.dlq, wantDLQ)

	// SCRAPE_SLOW was published and mirrored (lag is 0 now ⇒ false).
	testkit.WaitFor(t, 10*time.Second, "SCRAPE_SLOW=false in control_flags", func() bool {
		return count(t, pg.Pool, "SELECT count(*) FROM control_flags WHERE name = 'SCRAPE_SLOW' AND value = false") == 1
	})

	// Replay from the earliest offset: both tables stay as they are.
	before := snapshot(t, pg.Pool)
	if err := b.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(); err != nil {
		t.Fatalf("member B did not stop cleanly: %v", err)
	}
	testkit.WaitFor(t, 60*time.Second, "the group to be empty", func() bool {
		gs, err := adm.DescribeGroups(ctx, w.group)
		return err == nil && len(gs[w.group].Members) == 0
	})
	if _, err := groupctl.Replay(ctx, adm, groupctl.ReplayRequest{Group: w.group, Topics: []string{w.topic}, To: groupctl.Target{Kind: groupctl.Earliest}}); err != nil {
		t.Fatal(err)
	}
	w.startMember(500)
	testkit.WaitFor(t, 120*time.Second, "the replay to finish", func() bool {
		lag, err := groupctl.Lag(ctx, adm, w.group)
		g, ok := lag.Group(w.group)
		return err == nil && ok && g.Err == nil && g.Total == 0 && len(g.Partitions) == 6 && g.Members == 1
	})
	if after := snapshot(t, pg.Pool); after != before {
		t.Fatalf("replay changed the tables:\nbefore %s\nafter  %s", before, after)
	}
}

// expected folds the valid records, per key in partition order, with the
// stage and the in-memory merge rules; invalid records give the expected DLQ
// entries keyed by source coordinates.
func expected(t *testing.T, corpus []silver.Record, recs []*kgo.Record) (map[string]silver.TARow, map[string]silver.SARow, map[string]silver.Record) {
	t.Helper()
	stage := silver.Stage()
	ta, sa, dlq := map[string]silver.TARow{}, map[string]silver.SARow{}, map[string]silver.Record{}
	for i, c := range corpus {
		coord := fmt.Sprintf("%d/%d", recs[i].Partition, recs[i].Offset)
		if c.WantReason != "" {
			dlq[coord] = c
			continue
		}
		env, err := silver.Decode([]byte(c.Key), c.Value)
		if err != nil {
			t.Fatalf("valid corpus record %d does not decode: %v", i, err)
		}
		rows, err := stage(context.Background(), stages.Msg[silver.Envelope]{Key: c.Key, Value: env, Source: stages.Source{
			Topic: recs[i].Topic, Partition: recs[i].Partition, Offset: recs[i].Offset, Timestamp: recs[i].Timestamp.Truncate(time.Millisecond),
		}})
		if err != nil || len(rows) != 1 {
			t.Fatalf("valid corpus record %d: %v", i, err)
		}
		switch r := rows[0]; {
		case r.TA != nil:
			if old, ok := ta[r.TA.Key()]; ok {
				ta[r.TA.Key()] = silver.MergeTA(old, *r.TA)
			} else {
				ta[r.TA.Key()] = *r.TA
			}
		case r.SA != nil:
			if old, ok := sa[r.SA.Key()]; ok {
				sa[r.SA.Key()] = silver.MergeSA(old, *r.SA)
			} else {
				sa[r.SA.Key()] = *r.SA
			}
		}
	}
	return ta, sa, dlq
}

// checkRows loads the expected rows into twin tables and compares every
// column but ingest_time with EXCEPT in both directions.
func checkRows(t *testing.T, pool *pgxpool.Pool, ta map[string]silver.TARow, sa map[string]silver.SARow) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// Temp tables are per connection: create and compare on one connection.
	for _, q := range []string{"DROP TABLE IF EXISTS want_ta, want_sa", "CREATE TEMP TABLE want_ta (LIKE ta_silver INCLUDING DEFAULTS)", "CREATE TEMP TABLE want_sa (LIKE sa_silver INCLUDING DEFAULTS)"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	insert := func(table string, cols []string, rows [][]any) {
		ph := make([]string, len(cols))
		for i := range cols {
			ph[i] = "$" + strconv.Itoa(i+1)
		}
		q := fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", table, strings.Join(cols, ","), strings.Join(ph, ","))
		for _, r := range rows {
			if _, err := conn.Exec(ctx, q, r...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	taT, saT := silver.TATable(), silver.SATable()
	var taRows, saRows [][]any
	for _, r := range ta {
		taRows = append(taRows, taT.Values(r))
	}
	for _, r := range sa {
		saRows = append(saRows, saT.Values(r))
	}
	insert("want_ta", taT.Columns, taRows)
	insert("want_sa", saT.Columns, saRows)
	for _, c := range []struct{ got, want string }{{"ta_silver", "want_ta"}, {"sa_silver", "want_sa"}} {
		cols := "symbol, trade_date, open, high, low, close, volume, vwap, adj_close, currency, price_multiplier, source, first_seen_time, content_hash"
		if c.got == "sa_silver" {
			cols = strings.Join(saT.Columns, ", ")
		}
		var extra, missing int
		q := fmt.Sprintf("SELECT (SELECT count(*) FROM (SELECT %[1]s FROM %[2]s EXCEPT SELECT %[1]s FROM %[3]s) x), (SELECT count(*) FROM (SELECT %[1]s FROM %[3]s EXCEPT SELECT %[1]s FROM %[2]s) y)", cols, c.got, c.want)
		if err := conn.QueryRow(ctx, q).Scan(&extra, &missing); err != nil {
			t.Fatal(err)
		}
		var got int
		_ = conn.QueryRow(ctx, "SELECT count(*) FROM "+c.got).Scan(&got)
		if extra != 0 || missing != 0 {
			t.Errorf("%s: %d rows differ from the expected, %d expected rows missing (table has %d)", c.got, extra, missing, got)
		}
	}
	t.Logf("rows: ta_silver=%d sa_silver=%d as expected", len(ta), len(sa))
}

// checkDLQ reads the DLQ and compares it with the expected failures by
// source coordinates (a redelivery after the kill may repeat an entry).
func checkDLQ(t *testing.T, k *testkit.Kafka, topic string, want map[string]silver.Record) {
	t.Helper()
	recs := k.ReadTopic(t, topic)
	got := map[string]bool{}
	for _, r := range recs {
		h := testkit.Headers(r)
		coord := h[stages.HeaderSourcePartition] + "/" + h[stages.HeaderSourceOffset]
		w, ok := want[coord]
		switch {
		case !ok:
			t.Errorf("unexpected DLQ record from %s: %s %s %s", coord, h[stages.HeaderReason], h[stages.HeaderRule], h[stages.HeaderError])
		case h[stages.HeaderReason] != string(w.WantReason) || h[stages.HeaderRule] != w.WantRule:
			t.Errorf("DLQ record from %s: reason %q rule %q, want %q %q", coord, h[stages.HeaderReason], h[stages.HeaderRule], w.WantReason, w.WantRule)
		case string(r.Key) != w.Key || string(r.Value) != string(w.Value):
			t.Errorf("DLQ record from %s does not keep the original key and value", coord)
		}
		got[coord] = true
	}
	if len(got) != len(want) {
		t.Fatalf("DLQ holds %d distinct failures, want %d", len(got), len(want))
	}
	t.Logf("DLQ: %d records for %d expected failures", len(recs), len(want))
}

// snapshot fingerprints both tables without ingest_time.
func snapshot(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var ta, sa string
	if err := pool.QueryRow(context.Background(), `SELECT count(*) || ':' || md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), ''))
		FROM (SELECT symbol, trade_date, open, high, low, close, volume, vwap, adj_close, currency, price_multiplier, source, first_seen_time, content_hash FROM ta_silver) x`).Scan(&ta); err != nil {
		t.Fatal(err)
	}
	cols := strings.Join(silver.SATable().Columns, ", ")
	if err := pool.QueryRow(context.Background(), `SELECT count(*) || ':' || md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM (SELECT `+cols+` FROM sa_silver) x`).Scan(&sa); err != nil {
		t.Fatal(err)
	}
	return "ta=" + ta + " sa=" + sa
}
