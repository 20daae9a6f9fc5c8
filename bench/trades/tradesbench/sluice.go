package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	rpprof "runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/bench/internal/benchdb"
	"github.com/sluicehq/sluice/internal/kconf"
	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/sinks/objstore"
	srun "github.com/sluicehq/sluice/stages/run"
	"github.com/sluicehq/sluice/topics"
)

// sluiceFlags are the flags of the subcommands that run or inspect sluice's
// trades services: the run's topic and group prefix, its Postgres schema
// (in DATABASE_URL's database) and the digest child's knobs.
type sluiceFlags struct {
	prefix, schema, objects, addrFile, cpuProfile string
	settle, tick, horizon                         time.Duration
	partitions                                    int
}

func (f *sluiceFlags) register(fs interface {
	StringVar(*string, string, string, string)
	DurationVar(*time.Duration, string, time.Duration, string)
}) {
	fs.StringVar(&f.prefix, "prefix", "", "topic name prefix (logsize, delete: a run's, or its Kafka Streams application.id); the sluice subcommands: the run's topic and group prefix")
	fs.StringVar(&f.schema, "schema", "", "Postgres schema of the run (created by setup, dropped by teardown)")
	fs.StringVar(&f.objects, "objects", "", "digest: object store directory")
	fs.StringVar(&f.addrFile, "addr-file", "", "digest: file the ops server's address is written to")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "digest: write a CPU profile here until the process is interrupted")
	fs.DurationVar(&f.settle, "settle", time.Second, "digest: TRADES_DIGEST_SETTLE (the corpus's weeks are closed)")
	fs.DurationVar(&f.tick, "tick", time.Second, "digest: emission timer period")
	fs.DurationVar(&f.horizon, "horizon", 16*7*24*time.Hour, "digest: TRADES_DIGEST_HORIZON")
}

// schemaURL returns the database URL with search_path set to schema.
func schemaURL(base, schema string) (string, error) {
	if base == "" {
		return "", errors.New("no DATABASE_URL")
	}
	if schema == "" {
		return "", errors.New("no --schema")
	}
	return benchdb.SchemaURL(base, schema)
}

// setup creates the run's schema with sluice's migrations and the run's
// trades topics other than the corpus topic (which produce creates with
// retention off): trades.events, trades.import, trades.import.state,
// trades.digest.state, digest.ready, coach.reflect, trades.dlq, all with
// f.partitions partitions.
func setup(ctx context.Context, seeds []string, f sluiceFlags) error {
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := benchdb.FreshSchema(ctx, conn, os.Getenv("DATABASE_URL"), f.schema); err != nil {
		return err
	}
	want := map[string]bool{
		topics.TradesEvents: true, topics.TradesImport: true, topics.TradesImportState: true, topics.TradesBias: true,
		topics.TradesDigestState: true, topics.DigestReady: true, topics.CoachReflect: true, topics.TradesDLQ: true,
	}
	var specs []topics.Spec
	for _, s := range topics.Catalog() {
		if want[s.Name] {
			specs = append(specs, s)
		}
	}
	n := int32(f.partitions)
	specs, err = topics.Select(specs, topics.WithPrefix(f.prefix), topics.WithPartitions(topics.TradesBias, n),
		topics.WithPartitions(topics.TradesEvents, n), topics.WithPartitions(topics.TradesImport, n),
		topics.WithPartitions(topics.DigestReady, n), topics.WithPartitions(topics.CoachReflect, n))
	if err != nil {
		return err
	}
	for i := range specs {
		if specs[i].Name == f.prefix+topics.TradesBias {
			// produce created it with retention off (the corpus is weeks
			// old); leave its retention alone.
			specs[i].Retention = topics.BrokerDefault
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := topics.Ensure(ctx, kadm.NewClient(cl), specs); err != nil {
		return err
	}
	return nil
}

// teardown drops the run's schema and deletes the consumer groups whose
// names start with the run's prefix (sluice's and the peer's).
func teardown(ctx context.Context, seeds []string, f sluiceFlags) error {
	if len(f.prefix) >= 8 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			return err
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		groups, err := adm.ListGroups(ctx)
		if err != nil {
			return fmt.Errorf("list groups: %w", err)
		}
		var names []string
		for _, g := range groups.Groups() {
			if strings.HasPrefix(g, f.prefix) {
				names = append(names, g)
			}
		}
		if len(names) > 0 {
			if _, err := adm.DeleteGroups(ctx, names...); err != nil {
				return fmt.Errorf("delete groups: %w", err)
			}
		}
	}
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{f.schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", f.schema, err)
	}
	return nil
}

// pool opens a pool on the run's schema.
func pool(ctx context.Context, f sluiceFlags) (*pgxpool.Pool, error) {
	u, err := schemaURL(os.Getenv("DATABASE_URL"), f.schema)
	if err != nil {
		return nil, err
	}
	p, err := pgxpool.New(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return p, nil
}

// runDigest is the digest child: sluice's trades-digest service (built by
// the trades pipeline's declaration, renamed with the run's prefix; the
// import and score services it also builds are not run) on the run's
// topics, schema and a local object directory, with an ops server (/readyz,
// /metrics, /debug/pprof) whose address it writes to f.addrFile. It runs
// until interrupted.
func runDigest(ctx context.Context, seeds []string, f sluiceFlags) error {
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pf.Close()
		if err := rpprof.StartCPUProfile(pf); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer rpprof.StopCPUProfile()
	}
	kc := kconf.FromEnv()
	kc.Brokers = seeds
	kopts, err := kc.Opts()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ops := opshttp.New(reg, log)
	ops.Handle("GET /debug/pprof/", http.HandlerFunc(pprof.Index))
	ops.Handle("GET /debug/pprof/profile", http.HandlerFunc(pprof.Profile))
	db, err := pool(ctx, f)
	if err != nil {
		return err
	}
	defer db.Close()
	objects, err := objstore.NewDir(f.objects)
	if err != nil {
		return fmt.Errorf("object dir: %w", err)
	}
	// The build registers every built service's readiness on env.Ops: give
	// it a server that is never started, and register the digest's alone on
	// the one that is.
	env := pipelines.Env{Kafka: kopts, DB: db, Objects: objects, Registerer: reg, Logger: log, Ops: opshttp.New(reg, log)}
	// Memory as sluice run's own process sets it: the limits, else the
	// default soft memory limit and the budget derived from it.
	budget, from, softLimit := srun.ProcessBudget(0, os.Getenv("GOMEMLIMIT"), srun.CurrentMemoryLimits())
	if softLimit > 0 {
		debug.SetMemoryLimit(softLimit)
	}
	env.Memory = srun.NewBudget(budget)
	log.Info("memory budget", "bytes", budget, "from", from, "go_memory_limit", debug.SetMemoryLimit(-1))
	spec := pipelines.Naming{GroupPrefix: f.prefix, TopicPrefix: f.prefix}.Apply(trades.Declare(trades.Config{
		Digest: trades.DigestConfig{Settle: f.settle, Tick: f.tick, Horizon: f.horizon},
	}))
	var res pipelines.Resources
	defer res.Close()
	svcs, err := spec.Build(env, spec, &res)
	if err != nil {
		return err
	}
	var digest pipelines.Service
	for _, s := range svcs {
		if s.Name() == trades.DigestName {
			digest = s
		}
	}
	if digest == nil {
		return fmt.Errorf("the trades declaration built no %s service", trades.DigestName)
	}
	ops.AddReadiness(digest.Name(), digest.Ready)
	grp, gctx := errgroup.WithContext(ctx)
	addr, errc, err := ops.ListenAndServe(gctx, opshttp.Listen{Addr: "127.0.0.1:0"})
	if err != nil {
		return err
	}
	if f.addrFile != "" {
		if err := os.WriteFile(f.addrFile, []byte(addr.String()), 0o644); err != nil {
			return err
		}
	}
	grp.Go(func() error { return <-errc })
	grp.Go(func() error { return digest.Run(gctx) })
	err = grp.Wait()
	if errors.Is(err, context.Canceled) || ctx.Err() != nil {
		return nil
	}
	return err
}

// waitDigests polls the run's digests table once a second until it holds
// count final (not partial) digests of corpus users, then prints the unix
// milliseconds of that poll.
func waitDigests(ctx context.Context, f sluiceFlags, count int64, timeout time.Duration) error {
	db, err := pool(ctx, f)
	if err != nil {
		return err
	}
	defer db.Close()
	return waitUntil(ctx, timeout, func(ctx context.Context) (bool, string) {
		var n int64
		err := db.QueryRow(ctx, `SELECT count(*) FROM digests WHERE user_id <> $1 AND NOT partial`, watermarkUser).Scan(&n)
		return err == nil && n >= count, fmt.Sprintf("digests holds %d final rows, want %d (last error %v)", n, count, err)
	})
}

// checkDB compares the run's digests table with trades.Aggregate of the
// corpus (every row must be revision 1 and final: the corpus is delivered
// once, its weeks closed) and counts the digest.ready events of corpus
// users on the run's digest.ready topic: there must be exactly one per
// digest.
func checkDB(ctx context.Context, seeds []string, f sluiceFlags, spec corpusSpec, timeout time.Duration) error {
	want, err := spec.expectedDigests()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	db, err := pool(ctx, f)
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.Query(ctx, `SELECT user_id, period_start::text, period_end::text, revision, partial, agg::text
		FROM digests WHERE user_id <> $1`, watermarkUser)
	if err != nil {
		return fmt.Errorf("read digests: %w", err)
	}
	got := map[string][]byte{}
	notFinal := 0
	for rows.Next() {
		var user, start, end, agg string
		var rev int
		var partial bool
		if err := rows.Scan(&user, &start, &end, &rev, &partial, &agg); err != nil {
			return fmt.Errorf("read digests: %w", err)
		}
		if rev != 1 || partial {
			notFinal++
		}
		got[user+"|"+start] = []byte(fmt.Sprintf(`{"user_id":%q,"period":{"start":%q,"end":%q},"agg":%s}`, user, start, end, agg))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read digests: %w", err)
	}
	ready, distinct, err := countReady(ctx, seeds, f.prefix+topics.DigestReady)
	if err != nil {
		return err
	}
	cmpErr := compareDigests(want, got, fmt.Sprintf(`"rows":%d,"not_revision_1_final":%d,"digest_ready":%d,"digest_ready_distinct":%d`,
		len(got), notFinal, ready, distinct))
	if cmpErr != nil {
		return cmpErr
	}
	if notFinal > 0 || ready != int64(len(want)) || distinct != len(want) {
		return fmt.Errorf("%d rows not revision 1 final; %d digest.ready (%d distinct) for %d digests", notFinal, ready, distinct, len(want))
	}
	return nil
}

// countReady reads topic (digest.ready) to its end and returns the number
// of events of corpus users and of distinct (user, period, revision).
func countReady(ctx context.Context, seeds []string, topic string) (int64, int, error) {
	var n int64
	seen := map[string]bool{}
	var decodeErr error
	err := readAll(ctx, seeds, topic, func(r *kgo.Record) {
		e, err := trades.DecodeEvent(r.Value)
		if err != nil {
			decodeErr = err
			return
		}
		d, err := trades.DecodePayload[trades.DigestReady](e)
		if err != nil {
			decodeErr = err
			return
		}
		if d.UserID == watermarkUser {
			return
		}
		n++
		seen[fmt.Sprintf("%s|%s|%d", d.UserID, d.Period.Start, d.Revision)] = true
	})
	if err == nil && decodeErr != nil {
		err = fmt.Errorf("%s: %w", topic, decodeErr)
	}
	return n, len(seen), err
}

// digestLatency sends a digest.request for one closed corpus week to n
// corpus users, one after the other, and times each from the request's
// acknowledgement to its digest.ready on the run's topic; it prints every
// latency and the p50/p95/max in milliseconds.
func digestLatency(ctx context.Context, seeds []string, f sluiceFlags, spec corpusSpec, n int, timeout time.Duration) error {
	ready := f.prefix + topics.DigestReady
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(ready),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	if err != nil {
		return err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(0))
	if err != nil {
		return err
	}
	defer prod.Close()
	// The consumer's start offsets are resolved by its first poll: poll
	// once (briefly) before the first request.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	cons.PollFetches(pctx)
	cancel()
	week := spec.weeks()[spec.Weeks-1]
	var lat []time.Duration
	for i := range n {
		user := spec.userID(i * spec.Users / n)
		value, err := json.Marshal(trades.Event[trades.DigestRequest]{
			EventID: fmt.Sprintf("bench-slo-%s-%d", user, time.Now().UnixNano()), Type: trades.TypeDigestRequest,
			Timestamp: time.Now().UTC(), Payload: trades.DigestRequest{UserID: user, PeriodStart: week.StartDate()},
		})
		if err != nil {
			return err
		}
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: f.prefix + topics.TradesBias, Key: []byte(user), Value: value}).FirstErr(); err != nil {
			return fmt.Errorf("digest.request for %s: %w", user, err)
		}
		sent := time.Now()
		wctx, cancel := context.WithTimeout(ctx, timeout)
		found := false
		for !found {
			fs := cons.PollFetches(wctx)
			if wctx.Err() != nil {
				cancel()
				return fmt.Errorf("no digest.ready for %s %s within %s", user, week.StartDate(), timeout)
			}
			fs.EachRecord(func(r *kgo.Record) {
				e, err := trades.DecodeEvent(r.Value)
				if err != nil {
					return
				}
				d, err := trades.DecodePayload[trades.DigestReady](e)
				if err == nil && d.UserID == user && d.Period.Start == week.StartDate() {
					found = true
				}
			})
		}
		cancel()
		lat = append(lat, time.Since(sent))
	}
	out, err := json.Marshal(map[string]any{
		"requests": n, "week": week.StartDate(), "p50_ms": pct(lat, 50).Milliseconds(), "p95_ms": pct(lat, 95).Milliseconds(),
		"max_ms": pct(lat, 100).Milliseconds(), "all_ms": millis(lat),
	})
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// pct is the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := (p*len(s) + 99) / 100
	if k < 1 {
		k = 1
	}
	return s[k-1]
}

func millis(ds []time.Duration) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.Milliseconds()
	}
	return out
}
