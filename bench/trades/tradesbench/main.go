// Command tradesbench is the Go side of make bench-trades: it produces the
// deterministic trade.scored corpus, checks a digest implementation's
// output against trades.Aggregate, waits for an output topic to fill, and
// sums changelog sizes.
//
//	tradesbench create  --topic O            # an empty topic (6 partitions) for the digests
//	tradesbench produce --topic T            # corpus → T (6 partitions, key user_id)
//	tradesbench wait    --topic O --count N  # until O holds N records; prints the unix ms
//	tradesbench check   --topic O            # O's digests vs trades.Aggregate of the corpus
//	tradesbench logsize --prefix P           # bytes of the topics P*-changelog on disk
//	tradesbench delete  --prefix P           # delete the topics named P*
//
// sluice's side (the run's topics and groups prefixed P, its Postgres
// schema S in DATABASE_URL's database):
//
//	tradesbench setup    --prefix P --schema S   # schema + migrations, the run's trades topics
//	tradesbench digest   --prefix P --schema S --objects DIR --addr-file F  # trades-digest (child process)
//	tradesbench waitdb   --schema S --count N    # until N final digests rows; prints the unix ms
//	tradesbench checkdb  --prefix P --schema S   # digests rows vs trades.Aggregate, digest.ready count
//	tradesbench latency  --prefix P --n 20       # digest.request → digest.ready, one user at a time
//	tradesbench slo      --prefix P --schema S   # import and cached-sim latencies (trades-import in process)
//	tradesbench teardown --prefix P --schema S   # drop the schema, delete the groups P*
//
// The corpus flags (--users, --per-user, --weeks, --start, --seed) must be
// equal for produce and check. Brokers come from KAFKA_BROKERS.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/pipelines/trades"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tradesbench create|produce|wait|check|logsize|delete|setup|digest|waitdb|checkdb|latency|teardown [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "tradesbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	brokers := fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "Kafka seed brokers, comma separated")
	topic := fs.String("topic", "", "topic to produce to, wait on or check")
	var spec corpusSpec
	fs.IntVar(&spec.Users, "users", 2000, "users in the corpus")
	fs.IntVar(&spec.PerUser, "per-user", 600, "trades per user")
	fs.IntVar(&spec.Weeks, "weeks", 8, "closed ISO weeks the trades spread over")
	// The last 8 closed weeks by default: Kafka Streams' window store and
	// the broker's time-based retention drop windows older than their
	// retention, so the corpus is recent.
	defStart := trades.WeekOf(time.Now()).Start.AddDate(0, 0, -7*8).Format(time.DateOnly)
	start := fs.String("start", defStart, "first week's Monday (default: 8 weeks before this week's)")
	fs.Uint64Var(&spec.Seed, "seed", 16, "corpus seed")
	partitions := fs.Int("partitions", 6, "produce: partitions of the corpus topic; setup: of the run's trades topics")
	count := fs.Int("count", 0, "wait: records to wait for (default users × weeks)")
	timeout := fs.Duration("timeout", 30*time.Minute, "wait/check: give up after")
	suffix := fs.String("suffix", "-changelog", "logsize: topic name suffix")
	n := fs.Int("n", 20, "latency: users to request a digest for")
	imports := fs.Int("imports", 20, "slo: synthetic imports to time")
	sims := fs.Int("sims", 100, "slo: cached sim calls to time")
	var sf sluiceFlags
	sf.register(fs) // --prefix: logsize, delete and the sluice subcommands
	prefix := &sf.prefix
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if spec.Start, err = time.Parse(time.DateOnly, *start); err != nil || spec.Start.Weekday() != time.Monday {
		return fmt.Errorf("--start %q is not a Monday YYYY-MM-DD", *start)
	}
	if last := spec.Start.AddDate(0, 0, 7*spec.Weeks); last.After(trades.WeekOf(time.Now()).Start) {
		return fmt.Errorf("--start %s: the corpus's last week ends %s, after this week began; its weeks must be closed",
			*start, last.Format(time.DateOnly))
	}
	seeds := strings.Split(*brokers, ",")
	if *brokers == "" {
		return fmt.Errorf("no brokers: set KAFKA_BROKERS or --brokers")
	}
	if *count == 0 {
		*count = spec.Users * spec.Weeks
	}
	switch cmd {
	case "create":
		return create(ctx, seeds, *topic, int32(*partitions))
	case "produce":
		return produce(ctx, seeds, *topic, int32(*partitions), spec)
	case "wait":
		return waitFor(ctx, seeds, *topic, int64(*count), *timeout)
	case "check":
		return check(ctx, seeds, *topic, spec, *timeout)
	case "logsize":
		return logSize(ctx, seeds, *prefix, *suffix)
	case "delete":
		return deleteTopics(ctx, seeds, *prefix)
	case "setup":
		sf.partitions = *partitions
		return setup(ctx, seeds, sf)
	case "digest":
		return runDigest(ctx, seeds, sf)
	case "waitdb":
		return waitDigests(ctx, sf, int64(*count), *timeout)
	case "checkdb":
		return checkDB(ctx, seeds, sf, spec, *timeout)
	case "latency":
		return digestLatency(ctx, seeds, sf, spec, *n, *timeout)
	case "slo":
		return slo(ctx, seeds, sf, *imports, *sims)
	case "teardown":
		return teardown(ctx, seeds, sf)
	}
	return fmt.Errorf("unknown command %q", cmd)
}
