// Command silverbench is the silver benchmark behind `make bench-silver`
// (bench/silver.sh). In one run, on the real Kafka and PostgreSQL of the
// environment (KAFKA_BROKERS, DATABASE_URL), it pushes the same corpus of
// bronze records (silver.GenerateCorpus, fixed seed: half ta.bar, half
// sa.article, 10 % invalid) through
//
//	a. the sluice silver pipeline, produce → tables, run as a separate
//	   process (`silverbench pipeline`, the code path of `sluice run silver`
//	   with explicit topic names);
//	b. a Go port of the seed's worker: task_q, FOR UPDATE SKIP LOCKED inside
//	   the silver_consume advisory lock, batches of 500, per-task upsert or
//	   DLQ insert, then delete, 2 workers (variant_b.go);
//	c. the database's ceiling: the final rows applied from pre-loaded
//	   UNLOGGED staging tables with one INSERT … SELECT … ON CONFLICT per
//	   table (variant_c.go);
//	p. c′, the full ingest ceiling: the COPY of the final rows into
//	   temporary staging tables timed as well (variant_cfull.go);
//	m. a again inside a memory cgroup of the deployment's limit with its
//	   GOMEMLIMIT (memcg.go; needs root, reported as not run otherwise);
//	k. the Kafka Streams 4.4 peer (bench/silverpeers/kstreams, Java 17 and
//	   Maven; variant_peers.go);
//	w. the Watermill peer (bench/silverpeers/watermill, its own Go module);
//
// The default is acpm (about a minute for 1 M records); b takes minutes and
// is opt-in (--variants abcpm), and so are the peers k and w (--variants
// acpmkw, minutes). It checks that every variant leaves
// identical ta_silver/sa_silver contents and that a, m, b, k and w
// dead-letter the same records (a peer whose output differs is reported and
// left out of the ratios), and writes a Markdown report.
//
// Usage:
//
//	silverbench run [--n 1000000] [--out bench/results-silver.md] [--profile] [--variants acpm] …
//
// The other subcommands are the children it starts — `pipeline` (variant
// a), `seed` (variant b), `consume` (the Kafka fetch floor) — and `sink`, a
// diagnostic that times silver.NewSink alone on the corpus's rows.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/bench/internal/benchdb"
	"github.com/sluicehq/sluice/bench/internal/sysload"
	"github.com/sluicehq/sluice/internal/kconf"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: silverbench run|pipeline [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runBench(os.Args[2:])
	case "pipeline":
		err = runPipeline(os.Args[2:])
	case "consume":
		err = runConsume(os.Args[2:])
	case "seed":
		err = runSeed(os.Args[2:])
	case "sink":
		err = runSinkDiag(os.Args[2:])
	case "chaos":
		err = runChaos(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q (want run or pipeline)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "silverbench:", err)
		os.Exit(1)
	}
}

func logf2(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// config is the benchmark's configuration.
type config struct {
	n           int
	seed        int64
	invalid     float64
	partitions  int
	brokers     []string
	kopts       []kgo.Opt
	databaseURL string
	id          string
	prefix      string
	workDir     string
	out         string
	variants    string
	memLimitMiB int64
	peersDir    string
	peerTimeout time.Duration
	keep        bool
	profile     bool
	timeout     time.Duration
	pipeline    pipelineFlags
}

func runBench(args []string) error {
	cfg := &config{}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.IntVar(&cfg.n, "n", 1_000_000, "records in the corpus")
	fs.Int64Var(&cfg.seed, "seed", 20251121, "corpus seed")
	fs.Float64Var(&cfg.invalid, "invalid", 0.10, "fraction of invalid records")
	fs.IntVar(&cfg.partitions, "partitions", 6, "partitions of the bronze topic")
	fs.StringVar(&cfg.workDir, "workdir", "bench/.work", "directory for the pipeline log and profiles")
	fs.StringVar(&cfg.out, "out", "", "write the Markdown report to this file")
	fs.StringVar(&cfg.variants, "variants", "acpm", "variants to run: a, c, p = c′ (the full ingest ceiling: COPY + upsert timed), m = a in a memory cgroup (--memory-limit-mib, needs root; reported as not run without it), b = the seed's SKIP LOCKED design (opt-in: minutes), k = the Kafka Streams 4.4 peer and w = the Watermill peer (opt-in: minutes, --variants acpmkw), and B = the seed port without its advisory lock (informational)")
	fs.Int64Var(&cfg.memLimitMiB, "memory-limit-mib", 512, "variant m: the memory cgroup's limit and GOMEMLIMIT, MiB (deploy/k8s/silver.yaml's limits.memory)")
	fs.StringVar(&cfg.peersDir, "peers-dir", "bench/silverpeers", "variants k and w: the directory of the peers' sources (kstreams/, watermill/)")
	fs.DurationVar(&cfg.peerTimeout, "peer-timeout", 30*time.Minute, "variants k and w: limit for one peer")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the topics, group and schemas")
	fs.BoolVar(&cfg.profile, "profile", false, "write CPU and allocation profiles of the pipeline process to WORKDIR/pipeline.cpu.pprof and WORKDIR/pipeline.allocs.pprof")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "limit for variant a")
	fs.StringVar(&cfg.pipeline.dlqCommit, "dlq-commit", "", "variant a: run.Config.DLQCommit (transactional, at-least-once; empty: the runtime default)")
	fs.IntVar(&cfg.pipeline.batchMaxRecords, "batch-max-records", 0, "variant a: run.Config.BatchMaxRecords (0: pipeline default)")
	fs.IntVar(&cfg.pipeline.batchMaxBytes, "batch-max-bytes", 0, "variant a: run.Config.BatchMaxBytes (0: runtime default)")
	fs.IntVar(&cfg.pipeline.maxInFlight, "max-in-flight", 0, "variant a: run.Config.MaxInFlight (0: runtime default)")
	fs.DurationVar(&cfg.pipeline.batchLinger, "batch-linger", 0, "variant a: run.Config.BatchLinger (0: runtime default)")
	fs.IntVar(&cfg.pipeline.windowMaxKeys, "window-max-keys", 0, "variant a: run.Config.Window.MaxKeys (0: pipeline default, -1: no window)")
	fs.DurationVar(&cfg.pipeline.windowMaxAge, "window-max-age", 0, "variant a: run.Config.Window.MaxAge (0: pipeline default)")
	fs.IntVar(&cfg.pipeline.windowMaxTotalKeys, "window-max-total-keys", 0, "variant a: run.Config.Window.MaxTotalKeys (0: pipeline default, -1: no bound over all partitions)")
	fs.Int64Var(&cfg.pipeline.memoryBudgetMiB, "memory-budget-mib", 0, "variant a: the process's memory budget in MiB (0: run.BudgetFor's default, as sluice run)")
	fs.StringVar(&cfg.pipeline.trace, "trace", "", "variant a: write an execution trace of the pipeline process to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cfg.fromEnv(); err != nil {
		return err
	}
	cfg.id = fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)
	cfg.prefix = "bench-" + cfg.id + "."
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return bench(ctx, cfg)
}

// fromEnv sets the brokers, Kafka options and database URL from the
// environment (KAFKA_BROKERS and the KAFKA_* security settings,
// DATABASE_URL) and makes the work directory absolute, creating it.
func (cfg *config) fromEnv() error {
	kc := kconf.FromEnv()
	if len(kc.Brokers) == 0 {
		return fmt.Errorf("KAFKA_BROKERS is not set (start the stack: make stack-up, then . ~/.sluice-stack/env)")
	}
	cfg.brokers = kc.Brokers
	kopts, err := kc.Opts()
	if err != nil {
		return err
	}
	cfg.kopts = kopts
	if cfg.databaseURL = os.Getenv("DATABASE_URL"); cfg.databaseURL == "" {
		return fmt.Errorf("DATABASE_URL is not set")
	}
	if err := os.MkdirAll(cfg.workDir, 0o755); err != nil {
		return err
	}
	cfg.workDir, err = filepath.Abs(cfg.workDir)
	return err
}

// childFlags returns the flags of a pipeline child process on ts, dbURL and
// group, with an ops address on a free port.
func (cfg *config) childFlags(ts topicSet, dbURL, group string) (pipelineFlags, error) {
	port, err := freePort()
	if err != nil {
		return pipelineFlags{}, err
	}
	pf := cfg.pipeline
	pf.brokers = strings.Join(cfg.brokers, ",")
	pf.databaseURL = dbURL
	pf.group = group
	pf.topic, pf.dlqTopic, pf.flagsTopic = ts.bronze, ts.dlq, ts.flags
	pf.opsAddr = fmt.Sprintf("127.0.0.1:%d", port)
	return pf, nil
}

// results gathers everything the report shows.
type results struct {
	cfg       *config
	started   time.Time
	p         *prepared
	a         *resultA
	m         *resultA // a in a memory cgroup
	b         *resultB
	bUnlocked *resultB // informational: the seed port without its advisory lock
	c         *resultC
	p2        *resultP             // c′: the full ingest ceiling (variant p)
	peers     []*resultPeer        // k, w: the peers, in run order
	floor     time.Duration        // fetch-only consumer of the bronze topic
	sums      map[string]tableSums // variant → checksums
	dlqB      map[string]int
	dlqBTotal int
	readyB    int64
	loadAvg   string
	kafkaVer  string
	pgVer     string
	checks    []check
	info      []string
}

type check struct {
	name string
	ok   bool
	info string
}

func bench(ctx context.Context, cfg *config) (err error) {
	r := &results{cfg: cfg, started: time.Now(), sums: map[string]tableSums{}, loadAvg: sysload.Averages()}
	has := func(v string) bool { return strings.Contains(cfg.variants, v) }

	logf2("generating %d records (seed %d, %.0f %% invalid) and the expected outcome", cfg.n, cfg.seed, cfg.invalid*100)
	if r.p, err = prepare(cfg.seed, cfg.n, cfg.invalid); err != nil {
		return err
	}
	logf2("  %d valid (%d ta, %d sa) → %d ta rows, %d sa rows; %d invalid; %s", r.p.valid, r.p.validTA, r.p.validSA,
		len(r.p.finalTA), len(r.p.finalSA), r.p.invalid(), r.p.genTime.Round(time.Millisecond))

	cl, err := kgo.NewClient(cfg.kopts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	admin, err := pgx.Connect(ctx, cfg.databaseURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer admin.Close(context.Background())
	r.kafkaVer, r.pgVer = kafkaVersion(ctx, adm), pgVersion(ctx, admin)

	schemaOf := func(v string) string { return "bench_" + cfg.id + "_" + v }
	var ts topicSet
	defer func() {
		if cfg.keep {
			logf2("kept: topics %s*, groups %ssilver and %ssilver-m, schemas %s, %s, %s, %s", cfg.prefix, cfg.prefix, cfg.prefix, schemaOf("a"), schemaOf("m"), schemaOf("b"), schemaOf("c"))
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, v := range []string{"a", "m", "b", "bu", "c", "p", "k", "w"} {
			_, _ = admin.Exec(cctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schemaOf(v)}.Sanitize()+" CASCADE")
		}
		if ts.bronze != "" {
			_, _ = adm.DeleteGroups(cctx, cfg.prefix+"silver", cfg.prefix+"silver-m")
			_, _ = adm.DeleteTopics(cctx, ts.bronze, ts.dlq, ts.flags)
		}
	}()

	if has("a") || has("m") || has(peerKStreams) || has(peerWatermill) {
		logf2("a: topics %s* (%d partitions)", cfg.prefix, cfg.partitions)
		if ts, err = silverTopics(ctx, adm, cfg.prefix, cfg.partitions); err != nil {
			return err
		}
		logf2("a: producing %d records to %s", cfg.n, ts.bronze)
		prod, err := produce(ctx, cfg.kopts, ts.bronze, r.p)
		if err != nil {
			return err
		}
		logf2("a: produced in %s (%.0f records/s)", prod.Round(time.Millisecond), rate(cfg.n, prod))
		for _, cr := range []childRun{{name: "a", group: cfg.prefix + "silver"}, {name: "m", group: cfg.prefix + "silver-m", memLimit: cfg.memLimitMiB << 20}} {
			if !has(cr.name) {
				continue
			}
			urlA, err := benchdb.FreshSchema(ctx, admin, cfg.databaseURL, schemaOf(cr.name))
			if err != nil {
				return err
			}
			what := "starting the pipeline process"
			if cr.memLimit > 0 {
				what += fmt.Sprintf(" in a %d MiB memory cgroup with GOMEMLIMIT=%d", cfg.memLimitMiB, cr.memLimit)
			}
			logf2("%s: schema %s; %s", cr.name, schemaOf(cr.name), what)
			checkpoint(ctx, admin)
			res, err := runVariantA(ctx, cfg, adm, ts, urlA, r.p, cr)
			if err != nil {
				return fmt.Errorf("variant %s: %w", cr.name, err)
			}
			res.produce = prod
			if cr.name == "a" {
				r.a = res
			} else {
				r.m = res
			}
			if res.failure != "" {
				continue
			}
			logf2("%s: %s → %.0f records/s (offsets committed at %s); peak RSS %d MiB", cr.name, res.run.Round(time.Millisecond),
				rate(cfg.n, res.run), res.committed.Round(time.Millisecond), res.peakRSSKB/1024)
			logf2("%s: CPU by process: %s", cr.name, res.cpuSplit)
			if r.sums[cr.name], err = checksums(ctx, admin, schemaOf(cr.name)); err != nil {
				return err
			}
		}
		if r.a != nil {
			if r.floor, err = consumeFloor(ctx, cfg, ts.bronze); err != nil {
				return err
			}
			logf2("a: Kafka consume floor (fetch only, separate process): %s → %.0f records/s", r.floor.Round(time.Millisecond), rate(cfg.n, r.floor))
		}
		for _, name := range []string{peerKStreams, peerWatermill} {
			if !has(name) {
				continue
			}
			urlP, err := benchdb.FreshSchema(ctx, admin, cfg.databaseURL, schemaOf(name))
			if err != nil {
				return err
			}
			checkpoint(ctx, admin)
			res, err := runPeer(ctx, cfg, adm, ts, name, urlP)
			if err != nil {
				return fmt.Errorf("variant %s: %w", name, err)
			}
			r.peers = append(r.peers, res)
			if res.failure != "" {
				continue
			}
			logf2("%s: %s → %.0f records/s (group lag 0); peak RSS %d MiB, CPU %.1f s", name, res.run.Round(time.Millisecond),
				rate(cfg.n, res.run), res.peakRSSKB/1024, res.cpu.Seconds())
			logf2("%s: CPU by process: %s", name, res.cpuSplit)
			if r.sums[name], err = checksums(ctx, admin, schemaOf(name)); err != nil {
				return err
			}
		}
	}
	for _, bv := range []struct {
		name, schema string
		noLock       bool
		dst          **resultB
	}{{"b", schemaOf("b"), false, &r.b}, {"B", schemaOf("bu"), true, &r.bUnlocked}} {
		if !has(bv.name) {
			continue
		}
		schema := bv.schema
		urlB, err := benchdb.FreshSchema(ctx, admin, cfg.databaseURL, schema)
		if err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, urlB)
		if err != nil {
			return err
		}
		logf2("%s: loading %d tasks into %s.task_q", bv.name, cfg.n, schema)
		t0 := time.Now()
		err = loadTaskQueue(ctx, conn, r.p)
		conn.Close(context.Background())
		if err != nil {
			return err
		}
		logf2("%s: loaded in %s; running %d seed workers (advisory lock: %t)", bv.name, time.Since(t0).Round(time.Millisecond), seedWorkerCount, !bv.noLock)
		checkpoint(ctx, admin)
		res, err := runVariantB(ctx, cfg, urlB, bv.noLock)
		if err != nil {
			return fmt.Errorf("variant %s: %w", bv.name, err)
		}
		*bv.dst = res
		logf2("%s: %s → %.0f records/s (%d batches, %d lock misses, %d deadlocks, backlog check %s)", bv.name, res.Run.Round(time.Millisecond),
			rate(cfg.n, res.Run), res.Batches, res.LockMisses, res.Deadlocks, res.Backlog.Round(time.Millisecond))
		logf2("%s: CPU by process: %s", bv.name, res.cpuSplit)
		if r.sums[bv.name], err = checksums(ctx, admin, schema); err != nil {
			return err
		}
		if !bv.noLock {
			if r.dlqB, r.dlqBTotal, r.readyB, err = seedDLQ(ctx, admin, schema); err != nil {
				return err
			}
		}
	}
	if has("c") {
		urlC, err := benchdb.FreshSchema(ctx, admin, cfg.databaseURL, schemaOf("c"))
		if err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, urlC)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		logf2("c: loading %d ta + %d sa final rows into unlogged staging tables", len(r.p.finalTA), len(r.p.finalSA))
		t0 := time.Now()
		if err := loadVariantC(ctx, conn, r.p); err != nil {
			return err
		}
		loadC := time.Since(t0)
		checkpoint(ctx, admin)
		quiesce()
		if r.c, err = runVariantC(ctx, conn); err != nil {
			return err
		}
		r.c.load = loadC
		logf2("c: %s (ta %s, sa %s) → %.0f records/s over the %d input records", r.c.total().Round(time.Millisecond),
			r.c.ta.Round(time.Millisecond), r.c.sa.Round(time.Millisecond), rate(cfg.n, r.c.total()), cfg.n)
		if r.sums["c"], err = checksums(ctx, admin, schemaOf("c")); err != nil {
			return err
		}
	}
	if has("p") {
		urlP, err := benchdb.FreshSchema(ctx, admin, cfg.databaseURL, schemaOf("p"))
		if err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, urlP)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		checkpoint(ctx, admin)
		quiesce()
		logf2("c′: COPY of %d ta + %d sa final rows into temporary staging tables, then the two upserts (all timed)", len(r.p.finalTA), len(r.p.finalSA))
		if r.p2, err = runVariantP(ctx, conn, r.p); err != nil {
			return err
		}
		logf2("c′: %s (COPY %s, upserts %s) → %.0f records/s over the %d input records", r.p2.total().Round(time.Millisecond),
			(r.p2.copyTA + r.p2.copySA).Round(time.Millisecond), r.p2.upsert.total().Round(time.Millisecond), rate(cfg.n, r.p2.total()), cfg.n)
		if r.sums["p"], err = checksums(ctx, admin, schemaOf("p")); err != nil {
			return err
		}
	}
	r.verify()
	report := r.markdown()
	fmt.Println(report)
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(report), 0o644); err != nil {
			return err
		}
		logf2("report written to %s", cfg.out)
	}
	for _, c := range r.checks {
		if !c.ok {
			return fmt.Errorf("check failed: %s: %s", c.name, c.info)
		}
	}
	return nil
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// childExe returns a symbolic link to this executable named name in the
// work directory: a child started through it has name as its command name,
// so its CPU time is told apart from the harness's in the per-process split.
func childExe(cfg *config, name string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	link := filepath.Join(cfg.workDir, name)
	_ = os.Remove(link)
	if err := os.Symlink(exe, link); err != nil {
		return "", err
	}
	return link, nil
}

// quiesce collects the harness's garbage (the corpus was just built) so
// that its background GC does not run during a timed section.
func quiesce() {
	runtime.GC()
	debug.FreeOSMemory()
}

// checkpoint flushes dirty buffers so that one variant's writes are not
// paid for by the next one's timing.
func checkpoint(ctx context.Context, admin *pgx.Conn) {
	if _, err := admin.Exec(ctx, "CHECKPOINT"); err != nil {
		logf2("  (CHECKPOINT failed: %v)", err)
	}
}

func kafkaVersion(ctx context.Context, adm *kadm.Client) string {
	guess := "unknown"
	if vs, err := adm.ApiVersions(ctx); err == nil {
		for _, v := range vs.Sorted() {
			if v.Err == nil {
				guess = v.VersionGuess()
				break
			}
		}
	}
	if dir := os.Getenv("SLUICE_STACK_DIR"); dir != "" {
		if m, _ := filepath.Glob(filepath.Join(dir, "kafka", "lib", "kafka-clients-*.jar")); len(m) > 0 {
			v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0]), "kafka-clients-"), ".jar")
			return fmt.Sprintf("Apache Kafka %s, KRaft, 1 node (franz-go guess: %s)", v, guess)
		}
	}
	return guess
}

func pgVersion(ctx context.Context, conn *pgx.Conn) string {
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "unknown"
	}
	var fsync, sc, sb string
	_ = conn.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_setting('shared_buffers')").Scan(&fsync, &sc, &sb)
	return fmt.Sprintf("PostgreSQL %s (fsync=%s, synchronous_commit=%s, shared_buffers=%s)", v, fsync, sc, sb)
}

func goVersion() string { return runtime.Version() }
