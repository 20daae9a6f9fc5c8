// Command modules is the modules benchmark behind `make bench-modules`
// (bench/modules.sh). In one run, on the PostgreSQL of DATABASE_URL (a
// database of its own, created and dropped) and, for variant (ii), the
// Kafka of KAFKA_BROKERS, it sends the same workload — keys × per refresh
// requests of TICKER:options_flow at uniformly random times within a
// window (default 500 × 20 within 2 s, fixed seed) — through
//
//	(i) the seed's lock design ported to Go (seedlock.go): 50 goroutines;
//	    per request a freshness read, acquire_refresh_lock as a conditional
//	    UPDATE … RETURNING on a lock table of its own, a re-check,
//	    refreshing, the upstream call, the snapshot, ready, release; every
//	    statement its own transaction;
//	(ii) sluice: the requests produced to a refresh topic of the run's own
//	    and the view ticker_modules_status polled until every key is fresh,
//	    with the modules services started in process by startSluice
//	    (sluice.go) — the hook that is not wired yet;
//
// both against the same synthetic upstream (upstream.go: at most 12 calls
// at once, 100 ms each, counted), and in a chaos variant of (i): a 2 s
// lease and 5 % of upstream calls taking 3 s. It reports upstream calls
// (and duplicate calls per key), the time until every key is fresh,
// PostgreSQL commits per request (the xact_commit delta of the bench
// database in pg_stat_database), request latency p50/p99 (from the due
// time, queueing included), stale overwrites (ready writes moving
// fetched_at backwards) and the machine's load, as Markdown.
//
// Usage:
//
//	go run ./bench/modules [--variants i,chaos,ii] [--out bench/results-modules.md] [--keep]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/bench/internal/sysload"
	"github.com/sluicehq/sluice/internal/kconf"
	"github.com/sluicehq/sluice/pipelines/modules"
	"github.com/sluicehq/sluice/schemas"
)

// config is the run's settings (the flags).
type config struct {
	keys, per, workers, slots int
	partitions                int32
	window, latency, slow     time.Duration
	slowFrac                  float64
	chaosLease                time.Duration
	variants                  string
	out                       string
	keep, sluiceDry           bool
	note                      string
	seed                      uint64
	timeout                   time.Duration
}

// result is one variant's measurements.
type result struct {
	name            string
	ran             bool
	note            string
	requests        int
	freshKeys       int
	allFresh        time.Duration
	upstreamDone    time.Duration // the last upstream call's end, from the start
	start           time.Time     // the workload's start (variant ii)
	elapsed         time.Duration
	upstreamCalls   int64
	slowCalls       int64
	dupKeys         int
	dupCalls        int
	p50, p99        time.Duration
	ownCommits      int64
	polls           int64 // variant ii: the bench's own transactions (its clock's LISTEN, its check of the view; not counted as the system's commits)
	pgCommits       int64
	staleOverwrites int64
	lockMisses      int64
	loadBefore      string
	loadAfter       string
}

func main() {
	var c config
	flag.IntVar(&c.keys, "keys", 500, "distinct keys TICKER:options_flow")
	flag.IntVar(&c.per, "per", 20, "requests per key")
	flag.DurationVar(&c.window, "window", 2*time.Second, "all requests are due within this window")
	flag.IntVar(&c.workers, "workers", 50, "variant (i): request goroutines")
	flag.IntVar(&c.slots, "slots", 12, "upstream: concurrent calls at most")
	var parts int
	flag.IntVar(&parts, "partitions", 3, "variant (ii): partitions of the refresh and state topics (the declared default is 3)")
	flag.DurationVar(&c.latency, "latency", 100*time.Millisecond, "upstream: duration of a call")
	flag.DurationVar(&c.slow, "slow", 3*time.Second, "chaos: duration of a slow call")
	flag.Float64Var(&c.slowFrac, "slow-fraction", 0.05, "chaos: fraction of slow calls")
	flag.DurationVar(&c.chaosLease, "chaos-lease", 2*time.Second, "chaos: lock lease (the seed's is 120 s)")
	flag.StringVar(&c.variants, "variants", "i,chaos,ii,chaos-ii", "variants to run: i (seed locks), chaos (seed locks under chaos), ii (sluice), chaos-ii (sluice under chaos)")
	flag.StringVar(&c.note, "note", "", "a line added under the report's title (e.g. which tree variant (ii) ran)")
	flag.StringVar(&c.out, "out", "", "write the Markdown report here too")
	flag.BoolVar(&c.keep, "keep", false, "keep the bench database and topics")
	flag.BoolVar(&c.sluiceDry, "sluice-dry-run", false, "variant (ii) without the services: produce the workload and poll briefly (checks the driver)")
	flag.Uint64Var(&c.seed, "seed", 20261126, "workload and upstream seed")
	flag.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up waiting for all keys fresh after this long")
	flag.Parse()
	c.partitions = int32(parts)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench-modules:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return fmt.Errorf("DATABASE_URL is not set")
	}
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	dbName := fmt.Sprintf("sluice_bench_modules_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+dbName); err != nil {
		return fmt.Errorf("create database %s: %w", dbName, err)
	}
	if !c.keep {
		defer func() {
			if _, err := admin.Exec(context.WithoutCancel(ctx), "DROP DATABASE "+dbName+" WITH (FORCE)"); err != nil {
				fmt.Fprintln(os.Stderr, "bench-modules: drop database:", err)
			}
		}()
	}
	benchDSN, err := withDatabase(dsn, dbName)
	if err != nil {
		return err
	}
	arrivals := schedule(c.keys, c.per, c.window, c.seed)
	var results []result
	for _, v := range strings.Split(c.variants, ",") {
		var r result
		var err error
		before := sysload.Averages()
		switch strings.TrimSpace(v) {
		case "i":
			r, err = runSeedVariant(ctx, c, admin, benchDSN, dbName, arrivals, 120*time.Second, 0)
			r.name = "(i) seed locks, 50 goroutines, lease 120 s"
		case "chaos":
			r, err = runSeedVariant(ctx, c, admin, benchDSN, dbName, arrivals, c.chaosLease, c.slowFrac)
			r.name = fmt.Sprintf("(i) seed locks, chaos: lease %s, %.0f %% of calls %s", c.chaosLease, 100*c.slowFrac, c.slow)
		case "ii":
			r, err = runSluiceVariant(ctx, c, admin, benchDSN, dbName, arrivals, 0)
			r.name = fmt.Sprintf("(ii) sluice modules-refresh, %d partitions", c.partitions)
		case "chaos-ii":
			r, err = runSluiceVariant(ctx, c, admin, benchDSN, dbName, arrivals, c.slowFrac)
			r.name = fmt.Sprintf("(ii) sluice modules-refresh, %d partitions, chaos: %.0f %% of calls %s", c.partitions, 100*c.slowFrac, c.slow)
		default:
			return fmt.Errorf("unknown variant %q (want i, chaos, ii or chaos-ii)", v)
		}
		if err != nil {
			return fmt.Errorf("variant %s: %w", v, err)
		}
		r.loadBefore, r.loadAfter = before, sysload.Averages()
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "bench-modules: %s done\n", r.name)
	}
	report := renderReport(c, results)
	fmt.Print(report)
	if c.out != "" {
		if err := os.WriteFile(c.out, []byte(report), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", c.out, err)
		}
	}
	return nil
}

// withDatabase returns dsn with its database replaced by db.
func withDatabase(dsn, db string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("DATABASE_URL must be a URL (postgres://…) for the bench: %v", err)
	}
	u.Path = "/" + db
	return u.String(), nil
}

// xactCommit returns the bench database's committed transactions as
// pg_stat_database reports them (read from the admin connection, which is
// on another database, so its reads do not count).
func xactCommit(ctx context.Context, admin *pgx.Conn, db string) (int64, error) {
	var n int64
	if _, err := admin.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return 0, err
	}
	err := admin.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, db).Scan(&n)
	return n, err
}

// commitsDuring returns the bench database's commits made by work, whose
// connections must all be closed when it returns (a backend flushes its
// statistics when it exits).
func commitsDuring(ctx context.Context, admin *pgx.Conn, db string, work func() error) (int64, error) {
	before, err := xactCommit(ctx, admin, db)
	if err != nil {
		return 0, fmt.Errorf("read pg_stat_database: %w", err)
	}
	if err := work(); err != nil {
		return 0, err
	}
	time.Sleep(time.Second)
	after, err := xactCommit(ctx, admin, db)
	if err != nil {
		return 0, fmt.Errorf("read pg_stat_database: %w", err)
	}
	return after - before, nil
}

func runSeedVariant(ctx context.Context, c config, admin *pgx.Conn, dsn, db string, arrivals []arrival, lease time.Duration, slowFrac float64) (result, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return result{}, err
	}
	cfg.MaxConns = int32(c.workers + 2)
	setup, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	up := newUpstream(c.slots, c.latency, c.slow, slowFrac, c.seed)
	s := newSeedLock(setup, up, lease)
	if _, err := setup.Exec(ctx, `DROP SCHEMA IF EXISTS seedlock CASCADE`); err != nil {
		setup.Close()
		return result{}, err
	}
	if err := s.setup(ctx, c.keys); err != nil {
		setup.Close()
		return result{}, err
	}
	setup.Close()
	var r result
	commits, err := commitsDuring(ctx, admin, db, func() error {
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		clock, err := startReadyClock(ctx, dsn)
		if err != nil {
			return err
		}
		s.pool = pool
		r, err = runSeedLock(ctx, s, arrivals, c.workers)
		if err == nil {
			// The last ready write has committed; its notification may
			// still be on its way.
			_, _, err = clock.wait(ctx, c.keys, time.Now().Add(5*time.Second))
		}
		last, fresh := clock.lastReady()
		r.freshKeys, r.allFresh = fresh, last.Sub(r.start)
		return errors.Join(err, clock.close(ctx))
	})
	if err != nil {
		return result{}, err
	}
	// The clock's LISTEN is the bench's, not the system's.
	r.ran, r.pgCommits = true, commits-listenCommits
	return r, nil
}

// sluiceReset empties what a previous sluice variant left in the bench
// database and (re)creates the trigger counting updates of
// ticker_data_modules that move fetched_at backwards.
const sluiceReset = `
TRUNCATE ticker_data_modules, module_snapshots, unit_analyses, analysis_jobs;
CREATE TABLE IF NOT EXISTS bench_regressions (at TIMESTAMPTZ NOT NULL DEFAULT now());
TRUNCATE bench_regressions;
CREATE OR REPLACE FUNCTION bench_count_regression() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN INSERT INTO bench_regressions DEFAULT VALUES; RETURN NEW; END $$;
DROP TRIGGER IF EXISTS bench_regression ON ticker_data_modules;
CREATE TRIGGER bench_regression BEFORE UPDATE ON ticker_data_modules FOR EACH ROW
    WHEN (NEW.fetched_at < OLD.fetched_at) EXECUTE FUNCTION bench_count_regression();`

func runSluiceVariant(ctx context.Context, c config, admin *pgx.Conn, dsn, db string, arrivals []arrival, slowFrac float64) (result, error) {
	if _, err := schemas.Migrate(ctx, dsn); err != nil {
		return result{}, fmt.Errorf("migrate the bench database: %w", err)
	}
	if err := execOnce(ctx, dsn, sluiceReset+readyTriggerSQL("ticker_data_modules")); err != nil {
		return result{}, fmt.Errorf("reset the bench database: %w", err)
	}
	kc := kconf.FromEnv()
	kopts, err := kc.Opts()
	if err != nil {
		return result{}, err
	}
	prefix := fmt.Sprintf("bench.modules.%d.", time.Now().UnixNano())
	in := sluiceInputs{kafka: kopts, refreshTopic: prefix + "modules.refresh", stateTopic: prefix + "modules.state",
		dlqTopic: prefix + "modules.dlq", groupPrefix: prefix, reg: prometheus.NewRegistry(),
		source: newUpstream(c.slots, c.latency, c.slow, slowFrac, c.seed)}
	// The driver produces as the API does (modules.ProducerOpts).
	cl, err := kgo.NewClient(modules.ProducerOpts(kopts)...)
	if err != nil {
		return result{}, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	compact := "compact"
	for _, t := range []struct {
		name string
		cfg  map[string]*string
	}{{in.refreshTopic, nil}, {in.stateTopic, map[string]*string{"cleanup.policy": &compact}}, {in.dlqTopic, nil}} {
		if _, err := adm.CreateTopic(ctx, c.partitions, -1, t.cfg, t.name); err != nil {
			return result{}, fmt.Errorf("create topic %s: %w", t.name, err)
		}
	}
	if !c.keep {
		defer func() {
			_, _ = adm.DeleteTopics(context.WithoutCancel(ctx), in.refreshTopic, in.stateTopic, in.dlqTopic)
		}()
	}
	if err := waitTopics(ctx, adm, c.partitions, in.refreshTopic, in.stateTopic, in.dlqTopic); err != nil {
		return result{}, err
	}
	var r result
	commits, err := commitsDuring(ctx, admin, db, func() error {
		pcfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return err
		}
		// The services' pool: 16 connections (pgxpool's default is 4 on
		// this machine; the seed variant has one per goroutine, 52), so
		// that the refresh's concurrent requests do not queue for one.
		pcfg.MaxConns = 16
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		in.db = pool
		timeout := c.timeout
		stopSvc, err := startSluice(ctx, in)
		switch {
		case err == errSluiceNotBuilt && c.sluiceDry:
			r.note = "dry run: no services (startSluice not wired); the driver produced the workload and polled for 3 s"
			timeout = 3 * time.Second
		case err != nil:
			r.note = err.Error()
			return nil
		default:
			defer func() { _ = stopSvc() }()
		}
		clock, err := startReadyClock(ctx, dsn)
		if err != nil {
			return err
		}
		d := &sluiceDriver{cl: cl, db: pool, clock: clock, topic: in.refreshTopic, keys: c.keys}
		res, err := d.run(ctx, arrivals, timeout)
		if err = errors.Join(err, clock.close(ctx)); err != nil {
			return err
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM bench_regressions`).Scan(&res.staleOverwrites); err != nil {
			return fmt.Errorf("count fetched_at regressions: %w", err)
		}
		res.note = r.note
		r = res
		r.ran = true
		return nil
	})
	if err != nil {
		return result{}, err
	}
	// The bench's clock and its check of the view are its own, not the system's.
	r.pgCommits = commits - r.polls
	if up, ok := in.source.(*upstream); ok {
		r.upstreamCalls, r.slowCalls = up.calls.Load(), up.slowCalls.Load()
		r.upstreamDone = up.doneAfter(r.start)
		r.dupKeys, r.dupCalls = up.duplicates()
	}
	return r, nil
}

// waitTopics waits (at most 30 s) until the brokers' metadata lists every
// topic of names with its partitions.
func waitTopics(ctx context.Context, adm *kadm.Client, partitions int32, names ...string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		td, err := adm.ListTopics(ctx, names...)
		ready := err == nil
		for _, n := range names {
			d, ok := td[n]
			ready = ready && ok && d.Err == nil && int32(len(d.Partitions)) == partitions
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topics %v not listed with %d partitions after 30 s (%v)", names, partitions, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// execOnce runs sql on a connection of its own to dsn.
func execOnce(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

func renderReport(c config, rs []result) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# bench-modules: the seed's refresh locks vs sluice (%s)\n\n", time.Now().UTC().Format(time.RFC3339))
	if c.note != "" {
		fmt.Fprintf(&b, "%s\n\n", c.note)
	}
	fmt.Fprintf(&b, "Workload: %d keys `TICKER:options_flow` × %d requests, due at uniformly random times within %s (seed %d): %d requests. "+
		"Upstream: at most %d calls at once, %s each. PostgreSQL: a database of its own on DATABASE_URL. "+
		"Machine: %s, %d CPUs (GOMAXPROCS %d), shared with other jobs: load averages (1, 5, 15 min) before/after each variant below.\n\n",
		c.keys, c.per, c.window, c.seed, c.keys*c.per, c.slots, c.latency, host, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	b.WriteString("| variant | upstream calls | keys called > once (extra calls) | slow calls | keys fresh | time until all fresh (last upstream call done) | PG commits / request (pg_stat_database) | statements / request (own count) | request p50 | request p99 | stale overwrites | requests without the lock | load before → after |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rs {
		if !r.ran {
			fmt.Fprintf(&b, "| %s | not run: %s | | | | | | | | | | | %s → %s |\n", r.name, r.note, r.loadBefore, r.loadAfter)
			continue
		}
		perReq := func(n int64) string {
			if r.requests == 0 || n == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", float64(n)/float64(r.requests))
		}
		fmt.Fprintf(&b, "| %s | %d | %d (%d) | %d | %d/%d | %s (%s) | %s | %s | %s | %s | %d | %d | %s → %s |\n",
			r.name, r.upstreamCalls, r.dupKeys, r.dupCalls, r.slowCalls, r.freshKeys, c.keys, r.allFresh.Round(time.Millisecond), r.upstreamDone.Round(time.Millisecond),
			perReq(r.pgCommits), perReq(r.ownCommits), ms(r.p50), ms(r.p99), r.staleOverwrites, r.lockMisses, r.loadBefore, r.loadAfter)
	}
	for _, r := range rs {
		if r.ran && r.note != "" {
			fmt.Fprintf(&b, "\n%s: %s.\n", r.name, r.note)
		}
	}
	b.WriteString(`
Definitions. Request latency runs from a request's due time to its answer, queueing included: for (i) the
answer of the handler (fresh, or the current state when another holds the lock); for (ii) the produce ack
(what POST /api/v1/modules/refresh answers after). Time until all fresh: the same clock for both variants, the
commit of the last key's first ready write (to seedlock.tdm for (i), ticker_data_modules for (ii)), as the bench
receives it: a trigger on the table notifies the row's ticker (LISTEN/NOTIFY, delivered at commit); (ii) then
checks once that ticker_modules_status shows every key fresh. The clock's LISTEN and that check are the bench's
transactions and are not counted in the commits. PG commits
per request: the bench database's xact_commit delta over the variant (read-only statements count as
transactions), divided by the requests. Stale overwrites: for (i) ready writes whose fetched_at (the time the
data is of) is older than the row's, i.e. a holder whose lease ran out overwriting a newer refresh; for (ii)
updates of ticker_data_modules moving fetched_at backwards (a trigger counts them). Chaos: the same upstream
with a fraction of its calls slow; for (i) also a short lease.
`)
	return b.String()
}
