// Command chaos runs the pipelines other than silver (smap, ticks, trades,
// modules) under faults on a real stack: `make chaos` (deploy/scripts/
// chaos.sh, CHAOS_PIPELINES) after silver's scenarios (silverbench chaos).
//
// A scenario is PIPELINE:FAULT, e.g. smap:kill. Per scenario: fresh topics
// (sluice topics ensure --prefix), a fresh PostgreSQL schema, object-store
// bucket and consumer groups; the input produced; `sluice run PIPELINE`
// started as child processes of the built binary (two for kill, one
// otherwise); the fault injected once 10 % of the work is done; then a wait
// until every effect the input implies is there and every group's lag is
// 0; then a verifier compares the tables, topics, counters and objects with
// what the input implies. Faults:
//
//   - kill: kill -9 of one of two members, started again 2 s later;
//   - redis, postgres, minio, broker: the service (Kafka: every node)
//     stopped for 5 s and started again with deploy/stack/down.sh and
//     up.sh, so run them against a private stack (the script does), never
//     a shared one.
//
// Per pipeline: smap kill, redis, postgres, broker, minio; ticks kill,
// redis, broker, minio (ticks keeps nothing in PostgreSQL); trades kill,
// broker, postgres, redis (its sim's cache: sim calls through the API
// across the restart), minio; modules kill, postgres, redis (its
// limiter), broker (modules writes no object). The input and the verifier
// of each are documented on its workload type (smapLoad, ticksLoad,
// tradesLoad, modulesLoad).
//
// A scenario passes only with 0 lost and 0 duplicated effects (rows,
// counters, events, objects, dead letters) and work still pending when the
// fault began. The Markdown report goes to stdout and to --out.
//
// Usage:
//
//	chaos --sluice bench/.work/chaos/sluice --scenarios smap:kill,smap:redis [--out FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench/internal/faults"
	"github.com/sluicehq/sluice/internal/kconf"
)

// config is the run's settings and environment.
type config struct {
	sluice    string // the sluice binary
	workDir   string // children's logs
	out       string
	scale     float64 // input size factor (1: the default size)
	timeout   time.Duration
	stack     faults.Stack
	brokers   []string
	kc        kconf.Config
	dbURL     string
	redisURL  string
	s3        s3Env
	scenarios []string
}

// s3Env is the object store of the environment (S3_*).
type s3Env struct {
	endpoint, accessKey, secretKey string
	secure                         bool
}

// pipelineDef is a pipeline this runner drives: its workload and the
// faults it is run under.
type pipelineDef struct {
	load   func(cfg *config) workload
	faults []string
}

// workloads returns the pipelines this runner drives, by name.
func workloads() map[string]pipelineDef {
	return map[string]pipelineDef{
		"smap":    {func(cfg *config) workload { return newSmapLoad(cfg) }, []string{"kill", "redis", "postgres", "broker", "minio"}},
		"ticks":   {func(cfg *config) workload { return newTicksLoad(cfg) }, []string{"kill", "redis", "broker", "minio"}},
		"trades":  {func(cfg *config) workload { return newTradesLoad(cfg) }, []string{"kill", "broker", "postgres", "redis", "minio"}},
		"modules": {func(cfg *config) workload { return newModulesLoad(cfg) }, []string{"kill", "postgres", "redis", "broker"}},
	}
}

// defaultScenarios is every pipeline's default faults, in priority order.
func defaultScenarios() []string {
	var out []string
	for _, p := range []string{"smap", "ticks", "trades", "modules"} {
		w, ok := workloads()[p]
		if !ok {
			continue
		}
		for _, f := range w.faults {
			out = append(out, p+":"+f)
		}
	}
	return out
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05")+" "+format+"\n", args...)
}

func run(args []string) error {
	cfg := &config{}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.StringVar(&cfg.sluice, "sluice", "bench/.work/chaos/sluice", "the sluice binary the members run (go build -o … ./cmd/sluice)")
	fs.StringVar(&cfg.workDir, "workdir", "bench/.work/chaos", "directory for the members' logs")
	fs.StringVar(&cfg.out, "out", "", "also write the Markdown report to this file")
	fs.Float64Var(&cfg.scale, "scale", 1, "input size factor (1: the default size of each pipeline)")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Minute, "limit per scenario")
	fs.StringVar(&cfg.stack.Scripts, "stack", "deploy/stack", "the stack scripts (up.sh, down.sh) that restart services")
	scen := fs.String("scenarios", strings.Join(defaultScenarios(), ","), "PIPELINE:FAULT list; a bare PIPELINE runs its default faults")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if cfg.scenarios, err = parseScenarios(*scen); err != nil {
		return err
	}
	if err := cfg.fromEnv(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var results []result
	for _, s := range cfg.scenarios {
		logf("scenario %s", s)
		r := runScenario(ctx, cfg, s)
		if r.err != nil {
			logf("%s: %v", s, r.err)
		}
		results = append(results, r)
		if ctx.Err() != nil {
			break
		}
	}
	report := renderReport(cfg, results)
	fmt.Println(report)
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(report), 0o644); err != nil {
			return err
		}
	}
	var failed []string
	for _, r := range results {
		if !r.pass() {
			failed = append(failed, r.scenario)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("scenario(s) failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// parseScenarios expands "smap,ticks:kill" into PIPELINE:FAULT items and
// checks each names a known pipeline and fault.
func parseScenarios(s string) ([]string, error) {
	var out []string
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		p, f, hasFault := strings.Cut(item, ":")
		w, ok := workloads()[p]
		if !ok {
			return nil, fmt.Errorf("unknown pipeline %q in scenario %q (have %s)", p, item, strings.Join(knownPipelines(), ", "))
		}
		if !hasFault {
			for _, f := range w.faults {
				out = append(out, p+":"+f)
			}
			continue
		}
		// leader (kill -9 of a partition leader, on a 3-node stack) is
		// every pipeline's, run only when named.
		if !slices.Contains(w.faults, f) && f != "leader" {
			return nil, fmt.Errorf("scenario %q: %s runs under %s", item, p, strings.Join(w.faults, ", "))
		}
		out = append(out, item)
	}
	if len(out) == 0 {
		return nil, errors.New("no scenario")
	}
	return out, nil
}

func knownPipelines() []string {
	var ps []string
	for p := range workloads() {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// fromEnv reads the stack's environment (KAFKA_BROKERS and the KAFKA_*
// security settings, DATABASE_URL, REDIS_URL, S3_*) and makes the paths
// absolute.
func (cfg *config) fromEnv() error {
	cfg.kc = kconf.FromEnv()
	if len(cfg.kc.Brokers) == 0 {
		return errors.New("KAFKA_BROKERS is not set (source the private stack's env file)")
	}
	cfg.brokers = cfg.kc.Brokers
	for env, dst := range map[string]*string{"DATABASE_URL": &cfg.dbURL, "REDIS_URL": &cfg.redisURL, "S3_ENDPOINT": &cfg.s3.endpoint} {
		if *dst = os.Getenv(env); *dst == "" {
			return fmt.Errorf("%s is not set (source the private stack's env file)", env)
		}
	}
	cfg.s3.accessKey, cfg.s3.secretKey = os.Getenv("S3_ACCESS_KEY"), os.Getenv("S3_SECRET_KEY")
	cfg.s3.secure = os.Getenv("S3_SECURE") == "true"
	if err := os.MkdirAll(cfg.workDir, 0o755); err != nil {
		return err
	}
	var err error
	if cfg.workDir, err = filepath.Abs(cfg.workDir); err != nil {
		return err
	}
	if cfg.sluice, err = filepath.Abs(cfg.sluice); err != nil {
		return err
	}
	if _, err := os.Stat(cfg.sluice); err != nil {
		return fmt.Errorf("the sluice binary: %w (go build -o %s ./cmd/sluice)", err, cfg.sluice)
	}
	return nil
}
