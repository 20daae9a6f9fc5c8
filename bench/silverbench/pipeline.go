package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	rpprof "runtime/pprof"
	"runtime/trace"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/kconf"
	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/stages/run"
)

// pipelineFlags are the settings of the `pipeline` subcommand. Zero
// runtime values keep the defaults of silver.Services, which are what
// `sluice run silver` uses.
type pipelineFlags struct {
	brokers, databaseURL               string
	group, topic, dlqTopic, flagsTopic string
	opsAddr, cpuProfile, memProfile    string
	instanceID                         string
	batchMaxRecords, maxInFlight       int
	batchMaxBytes                      int
	batchLinger                        time.Duration
	windowMaxKeys, windowMaxTotalKeys  int
	windowMaxAge                       time.Duration
	dlqCommit                          string
	memoryBudgetMiB                    int64
	trace                              string
}

func (p *pipelineFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.brokers, "brokers", os.Getenv("KAFKA_BROKERS"), "Kafka seed brokers (env KAFKA_BROKERS)")
	fs.StringVar(&p.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL; put the schema in search_path (env DATABASE_URL)")
	fs.StringVar(&p.group, "group", "silver", "consumer group")
	fs.StringVar(&p.topic, "topic", "bronze.records", "bronze topic")
	fs.StringVar(&p.dlqTopic, "dlq-topic", "bronze.dlq", "DLQ topic")
	fs.StringVar(&p.flagsTopic, "flags-topic", "control.flags", "control flags topic")
	fs.StringVar(&p.opsAddr, "ops-addr", "127.0.0.1:0", "ops HTTP address (/metrics, /debug/pprof/)")
	fs.StringVar(&p.instanceID, "instance-id", "", "static group membership, as sluice run --instance-id")
	fs.StringVar(&p.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&p.memProfile, "memprofile", "", "write an allocation profile (allocs, all sizes) of the whole run to this file at exit")
	fs.IntVar(&p.batchMaxRecords, "batch-max-records", 0, "run.Config.BatchMaxRecords (0: the pipeline's default)")
	fs.IntVar(&p.batchMaxBytes, "batch-max-bytes", 0, "run.Config.BatchMaxBytes (0: the runtime's default)")
	fs.IntVar(&p.maxInFlight, "max-in-flight", 0, "run.Config.MaxInFlight (0: the runtime's default)")
	fs.DurationVar(&p.batchLinger, "batch-linger", 0, "run.Config.BatchLinger (0: the runtime's default)")
	fs.IntVar(&p.windowMaxKeys, "window-max-keys", 0, "run.Config.Window.MaxKeys (0: the pipeline's default, -1: no window)")
	fs.DurationVar(&p.windowMaxAge, "window-max-age", 0, "run.Config.Window.MaxAge (0: the pipeline's default)")
	fs.IntVar(&p.windowMaxTotalKeys, "window-max-total-keys", 0, "run.Config.Window.MaxTotalKeys (0: the pipeline's default, -1: no bound over all partitions)")
	fs.StringVar(&p.dlqCommit, "dlq-commit", "", "run.Config.DLQCommit (transactional, at-least-once; empty: the runtime's default)")
	fs.Int64Var(&p.memoryBudgetMiB, "memory-budget-mib", 0, "the process's memory budget in MiB, as sluice run --memory-budget (0: run.BudgetFor's default)")
	fs.StringVar(&p.trace, "trace", "", "write an execution trace (runtime/trace) of the whole run to this file")
}

// args renders p back into command-line arguments for the child process.
func (p *pipelineFlags) args() []string {
	a := []string{"pipeline",
		"--brokers", p.brokers, "--database-url", p.databaseURL,
		"--group", p.group, "--topic", p.topic, "--dlq-topic", p.dlqTopic, "--flags-topic", p.flagsTopic,
		"--ops-addr", p.opsAddr,
		"--batch-max-records", fmt.Sprint(p.batchMaxRecords), "--batch-max-bytes", fmt.Sprint(p.batchMaxBytes),
		"--max-in-flight", fmt.Sprint(p.maxInFlight), "--batch-linger", p.batchLinger.String(),
		"--window-max-keys", fmt.Sprint(p.windowMaxKeys), "--window-max-age", p.windowMaxAge.String(),
		"--window-max-total-keys", fmt.Sprint(p.windowMaxTotalKeys),
	}
	if p.dlqCommit != "" {
		a = append(a, "--dlq-commit", p.dlqCommit)
	}
	if p.cpuProfile != "" {
		a = append(a, "--cpuprofile", p.cpuProfile)
	}
	if p.memoryBudgetMiB > 0 {
		a = append(a, "--memory-budget-mib", fmt.Sprint(p.memoryBudgetMiB))
	}
	if p.trace != "" {
		a = append(a, "--trace", p.trace)
	}
	if p.instanceID != "" {
		a = append(a, "--instance-id", p.instanceID)
	}
	if p.memProfile != "" {
		a = append(a, "--memprofile", p.memProfile)
	}
	return a
}

// runPipeline is the `pipeline` subcommand: the silver pipeline exactly as
// `sluice run silver` builds it (silver.Services on a pipelines.Env with a
// pgx pool, a Prometheus registry with the Go and process collectors and
// the ops HTTP server), but with explicit topic names so that the benchmark
// runs on an isolated topic set. It runs until SIGINT/SIGTERM.
func runPipeline(args []string) error {
	var p pipelineFlags
	fs := flag.NewFlagSet("pipeline", flag.ContinueOnError)
	p.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if p.cpuProfile != "" {
		f, err := os.Create(p.cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := rpprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer rpprof.StopCPUProfile()
	}

	if p.trace != "" {
		f, err := os.Create(p.trace)
		if err != nil {
			return fmt.Errorf("trace: %w", err)
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return fmt.Errorf("trace: %w", err)
		}
		defer trace.Stop()
	}

	if p.memProfile != "" {
		runtime.MemProfileRate = 64 << 10
		defer func() {
			if err := writeAllocs(p.memProfile); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}

	kc := kconf.FromEnv()
	kc.Brokers = kconf.SplitBrokers(p.brokers)
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

	pcfg, err := pgxpool.ParseConfig(p.databaseURL)
	if err != nil {
		return fmt.Errorf("invalid database URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}

	env := pipelines.Env{Kafka: kopts, DB: pool, Registerer: reg, Logger: log, Ops: ops, InstanceID: p.instanceID}
	// As sluice run's own process: the budget flag, else the limits, else
	// the default soft memory limit and the budget derived from it.
	budget, _, softLimit := run.ProcessBudget(p.memoryBudgetMiB<<20, os.Getenv("GOMEMLIMIT"), run.CurrentMemoryLimits())
	if softLimit > 0 {
		debug.SetMemoryLimit(softLimit)
	}
	env.Memory = run.NewBudget(budget)
	services, err := silver.Services(env, silver.Config{
		Group: p.group, Topic: p.topic, DLQTopic: p.dlqTopic, FlagsTopic: p.flagsTopic,
		Runtime: run.Config{
			BatchMaxRecords: p.batchMaxRecords, BatchMaxBytes: p.batchMaxBytes, DLQCommit: p.dlqCommit,
			MaxInFlight: p.maxInFlight, BatchLinger: p.batchLinger,
			Window: run.WindowConfig{MaxKeys: p.windowMaxKeys, MaxAge: p.windowMaxAge, MaxTotalKeys: p.windowMaxTotalKeys},
		},
	})
	if err != nil {
		return err
	}
	grp, gctx := errgroup.WithContext(ctx)
	for _, s := range services {
		ops.AddReadiness(s.Name(), s.Ready)
	}
	// The bench mounts no write route: nothing needs a token.
	addr, errc, err := ops.ListenAndServe(gctx, opshttp.Listen{Addr: p.opsAddr, Open: true})
	if err != nil {
		return err
	}
	log.Info("ops endpoints", "addr", addr.String())
	grp.Go(func() error { return <-errc })
	for _, s := range services {
		grp.Go(func() error {
			if err := s.Run(gctx); err != nil {
				return fmt.Errorf("%s: %w", s.Name(), err)
			}
			return nil
		})
	}
	err = grp.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// writeAllocs writes the allocs profile (every allocation since the start,
// sampled at runtime.MemProfileRate) to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("alloc profile: %w", err)
	}
	defer f.Close()
	if err := rpprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		return fmt.Errorf("alloc profile: %w", err)
	}
	return nil
}
