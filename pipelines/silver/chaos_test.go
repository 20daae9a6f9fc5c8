package silver_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/localsvc"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// chaosOutage is how long PostgreSQL stays down in TestSilverSurvivesPostgresChaos.
// It is longer than the runtime's default retry budget of a stage
// (Retry.MaxAttempts 5 with SinkRetry's 200 ms doubling backoff: about 3 s of
// waits), so a sink failure that counted against that budget would
// dead-letter valid records as retries_exhausted.
const chaosOutage = 4 * time.Second

// TestSilverSurvivesPostgresChaos runs the silver pipeline (built like
// `sluice run silver`: silver.Services on a pgx pool with a 10 s connect
// timeout) on a private PostgreSQL and injects two faults while writes are
// in flight:
//
//  1. PostgreSQL is stopped (fast shutdown) for chaosOutage and started
//     again on the same data directory and port;
//  2. every client backend of the database, the sink's included, is killed
//     with pg_terminate_backend.
//
// Before each fault the test holds an EXCLUSIVE lock on ta_silver and
// sa_silver and waits until a sink backend is blocked on it, so the fault
// hits a write in progress, not an idle pool. The corpus is produced in
// three chunks (one per phase) whose keys repeat across chunks, so the
// later upserts merge into rows written before the faults.
//
// Afterwards the tables hold exactly the merge of the valid records, the
// DLQ exactly the invalid ones (no sink_rejected, no retries_exhausted),
// the group's committed offsets are the high watermarks, the sink retries
// are visible in sluice_retries_total, and neither service stopped.
func TestSilverSurvivesPostgresChaos(t *testing.T) {
	ctx := testkit.Context(t)
	dir := chaosPGDir(t)
	pg, err := localsvc.StartPostgres(ctx, localsvc.PostgresOptions{Dir: dir})
	if errors.Is(err, localsvc.ErrNotFound) {
		t.Skipf("PostgreSQL binaries not installed (this test restarts a private server): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	current := pg // the running server, stopped on cleanup
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("postgres output (tail):\n%s", current.Output())
		}
		_ = current.Stop()
	})
	url, err := pg.CreateDatabase(ctx, "silver")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schemas.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	// The pipeline's pool, configured as cmd/sluice's connectPostgres does.
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.ConnectTimeout = 10 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	check, err := pgxpool.New(ctx, url) // the test's own reads
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(check.Close)

	k := testkit.NewKafka(t, testkit.FakeOK())
	group := testkit.Name(t, "silver")
	topic, dlq, flags := k.Topic(t, "bronze", 6), k.Topic(t, "bronze_dlq", 2), k.Topic(t, "flags", 1)
	cl := k.Client(t)
	adm := k.Admin(t)

	corpus := silver.GenerateCorpus(21, 3000, 0.1)
	recs := make([]*kgo.Record, len(corpus))
	for i, c := range corpus {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(c.Key), Value: c.Value}
	}
	chunks := [][]*kgo.Record{recs[:1000], recs[1000:2000], recs[2000:]}
	produce := func(rs []*kgo.Record) {
		t.Helper()
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	total := func() int {
		return count(t, check, "SELECT (SELECT count(*) FROM ta_silver) + (SELECT count(*) FROM sa_silver)")
	}

	reg := prometheus.NewRegistry()
	env := pipelines.Env{
		Kafka:      k.Opts(t),
		DB:         pool,
		Registerer: reg,
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	// Small batches and windows, so that a phase is many short transactions.
	svcs, err := silver.Services(env, silver.Config{
		Group: group, Topic: topic, DLQTopic: dlq, FlagsTopic: flags, BacklogInterval: 200 * time.Millisecond,
		Runtime: run.Config{BatchMaxRecords: 50, BatchLinger: 5 * time.Millisecond, CommitInterval: 100 * time.Millisecond,
			Window: run.WindowConfig{MaxKeys: 20}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var stops []func() error
	for _, s := range svcs {
		// RunInBackground fails the test if a service returns on its own.
		stops = append(stops, testkit.RunInBackground(t, s.Name(), s.Run))
	}
	sinkRetries := func() float64 { return testkit.Metric(t, reg, "sluice_retries_total", "kind", "sink") }

	// Phase 1: the first chunk lands normally.
	produce(chunks[0])
	waitCaughtUp(t, adm, group, topic, "the first chunk")
	landed := total()
	if landed == 0 {
		t.Fatal("no row landed from the first chunk")
	}
	t.Logf("phase 1: %d rows landed", landed)

	// Phase 2: PostgreSQL stops while writes are blocked in their
	// transactions, stays down for chaosOutage, and comes back on the same
	// data directory and port.
	lockTables(t, ctx, url)
	produce(chunks[1])
	waitWriteInFlight(t, check)
	before := sinkRetries()
	port := pg.Port
	if err := pg.Stop(); err != nil {
		t.Fatalf("stop postgres: %v", err)
	}
	t.Logf("phase 2: postgres stopped with writes in flight; down for %s", chaosOutage)
	time.Sleep(chaosOutage)
	duringOutage := sinkRetries() - before
	pg, err = localsvc.StartPostgres(ctx, localsvc.PostgresOptions{Dir: dir, Port: port})
	if err != nil {
		t.Fatalf("restart postgres on port %d: %v", port, err)
	}
	current = pg
	if duringOutage < 2 {
		t.Errorf("%v sink retries during a %s outage; want the failed writes retried with backoff", duringOutage, chaosOutage)
	}
	waitCaughtUp(t, adm, group, topic, "the second chunk after the restart")
	t.Logf("phase 2: %v sink retries during the outage, %d rows now", duringOutage, total())

	// Phase 3: every client backend is terminated while writes are blocked
	// in their transactions.
	release := lockTables(t, ctx, url)
	produce(chunks[2])
	waitWriteInFlight(t, check)
	before = sinkRetries()
	var killed int
	if err := check.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	release() // the lock holder was terminated too; this only closes its connection
	waitCaughtUp(t, adm, group, topic, "the third chunk after pg_terminate_backend")
	afterKill := sinkRetries() - before
	if afterKill < 1 {
		t.Errorf("no sink retry after terminating %d backends under writes", killed)
	}
	t.Logf("phase 3: terminated %d backends; %v sink retries", killed, afterKill)

	// Nothing lost, nothing dead-lettered but the invalid records.
	wantTA, wantSA, wantDLQ := expected(t, corpus, recs)
	if want := len(wantTA) + len(wantSA); landed >= want {
		t.Errorf("all %d rows had landed before the faults: they tested nothing", want)
	}
	checkRows(t, check, wantTA, wantSA)
	checkDLQ(t, k, dlq, wantDLQ)
	if n := len(k.ReadTopic(t, dlq, testkit.ReadCommitted())); n != len(wantDLQ) {
		t.Errorf("DLQ holds %d records for %d invalid records: a record was dead-lettered twice", n, len(wantDLQ))
	}
	for _, reason := range []stages.Reason{stages.ReasonSinkRejected, stages.ReasonRetriesExhausted} {
		if n := testkit.Metric(t, reg, "sluice_dlq_records_total", "reason", string(reason)); n != 0 {
			t.Errorf("sluice_dlq_records_total{reason=%q} = %v, want 0", reason, n)
		}
	}
	if n := testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "fatal"); n != 0 {
		t.Errorf("sluice_runtime_errors_total{kind=fatal} = %v", n)
	}
	if n := testkit.Metric(t, reg, "sluice_pgsink_rows_rejected_total"); n != 0 {
		t.Errorf("sluice_pgsink_rows_rejected_total = %v, want 0", n)
	}
	ends, committed := testkit.EndOffsets(t, adm, topic), testkit.Committed(t, adm, group, topic)
	for p, end := range ends {
		if committed[p] != end {
			t.Errorf("partition %d: committed %d, high watermark %d", p, committed[p], end)
		}
	}
	for i, stop := range stops {
		if err := stop(); err != nil {
			t.Errorf("%s: %v", svcs[i].Name(), err)
		}
	}
}

// chaosPGDir returns a fresh directory for a PostgreSQL cluster that
// outlives a Stop (localsvc keeps a given Dir), removed when t ends. When
// the test runs as root, the server runs as the "postgres" OS user, so the
// directory is made under /tmp and made searchable (see localsvc's package
// doc).
func chaosPGDir(t *testing.T) string {
	t.Helper()
	parent := ""
	if os.Geteuid() == 0 {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "silver-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir + "/pg"
}

// lockTables takes an EXCLUSIVE lock on ta_silver and sa_silver in an open
// transaction on its own connection: the sink's reads still run, its
// writes block. The returned func ends the transaction and closes the
// connection (errors ignored: the fault may have killed it); it also runs
// on cleanup.
func lockTables(t *testing.T, ctx context.Context, url string) (release func()) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "BEGIN; LOCK TABLE ta_silver, sa_silver IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	release = func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = conn.Exec(cctx, "ROLLBACK")
		_ = conn.Close(cctx)
	}
	t.Cleanup(release)
	return release
}

// waitWriteInFlight waits until a backend of the database waits for a
// lock: a sink write that is inside its transaction.
func waitWriteInFlight(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, "a sink write blocked in its transaction", func() bool {
		return count(t, pool, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
}

// waitCaughtUp waits until group has committed the high watermark of every
// partition of topic (as it is now).
func waitCaughtUp(t *testing.T, adm *kadm.Client, group, topic, what string) {
	t.Helper()
	ends := testkit.EndOffsets(t, adm, topic)
	testkit.WaitFor(t, 30*time.Second, "silver to commit "+what, func() bool {
		committed := testkit.Committed(t, adm, group, topic)
		for p, end := range ends {
			if committed[p] < end {
				return false
			}
		}
		return true
	})
}
