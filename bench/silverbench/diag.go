package main

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/bench/internal/benchdb"
	"github.com/sluicehq/sluice/pipelines/silver"
)

// runSinkDiag is the `sink` subcommand, a diagnostic: it writes the valid
// rows of the corpus straight through silver.NewSink (no Kafka, no decode
// in the timed part), split into partitions by key hash and into batches
// of --batch records per partition, with one writer per partition, and
// prints the time. It shows how much of variant a is database work for a
// given batch size.
func runSinkDiag(args []string) error {
	fs := flag.NewFlagSet("sink", flag.ContinueOnError)
	n := fs.Int("n", 1_000_000, "records in the corpus")
	seed := fs.Int64("seed", 20251121, "corpus seed")
	parts := fs.Int("partitions", 6, "partitions (concurrent writers)")
	batch := fs.Int("batch", 2000, "records per batch (before dropping invalid ones)")
	poolSize := fs.Int("pool", 0, "pgxpool MaxConns (0: pgx default)")
	keep := fs.Bool("keep", false, "keep the schema")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	base := os.Getenv("DATABASE_URL")
	p, err := prepare(*seed, *n, 0.10)
	if err != nil {
		return err
	}
	rows := make([][]silver.Row, *parts)
	counts := make([]int, *parts)
	v := silver.NewValidator()
	for i, rec := range p.recs {
		h := fnv.New32a()
		h.Write([]byte(rec.Key))
		k := int(h.Sum32() % uint32(*parts))
		counts[k]++
		env, err := silver.Decode(nil, rec.Value)
		if err != nil {
			rows[k] = append(rows[k], silver.Row{})
			continue
		}
		r, err := v.Transform(env, p.recordTime(i))
		if err != nil {
			r = silver.Row{}
		}
		rows[k] = append(rows[k], r)
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	schema := fmt.Sprintf("bench_diag_%x", time.Now().UnixNano()&0xffffffff)
	u, err := benchdb.FreshSchema(ctx, admin, base, schema)
	if err != nil {
		return err
	}
	if !*keep {
		defer admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	}
	pcfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return err
	}
	if *poolSize > 0 {
		pcfg.MaxConns = int32(*poolSize)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	sink, err := silver.NewSink(pool)
	if err != nil {
		return err
	}
	checkpoint(ctx, admin)
	sampler := startCPUSampler()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, *parts)
	writes := 0
	for k := range rows {
		for i := 0; i < len(rows[k]); i += *batch {
			writes++
		}
		wg.Go(func() {
			for i := 0; i < len(rows[k]); i += *batch {
				var b []silver.Row
				for _, r := range rows[k][i:min(i+*batch, len(rows[k]))] {
					if r.TA != nil || r.SA != nil {
						b = append(b, r)
					}
				}
				if err := sink.Write(ctx, b); err != nil {
					errs[k] = err
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	sums, err := checksums(ctx, admin, schema)
	if err != nil {
		return err
	}
	fmt.Printf("sink: %d valid rows in %d writes of ≤ %d records over %d partitions: %s (%.0f input records/s); tables ta %d sa %d rows\n",
		p.valid, writes, *batch, *parts, d.Round(time.Millisecond), rate(*n, d), sums.ta.rows, sums.sa.rows)
	fmt.Printf("CPU: %s\n", cpuSplit(sampler.stop()))
	return nil
}
