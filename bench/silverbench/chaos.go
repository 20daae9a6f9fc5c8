package main

// silverbench chaos: the silver pipeline under faults on a real stack
// (make chaos, deploy/scripts/chaos.sh). Per scenario: a fresh topic set,
// schema and group; the corpus produced; pipeline processes started; a
// fault injected once 10 % of the records are done; then a wait until the
// group's lag is 0; then a verifier compares what the tables and the DLQ
// topic hold with what the corpus implies:
//
//   - rows: ta_silver/sa_silver equal the expected final rows (checksums of
//     every column, compared with the rows the corpus implies loaded into a
//     reference schema), so none is lost and none holds a value applied
//     twice out of order;
//   - dead letters: read with read_committed, one per invalid record, keyed
//     by their dlq.source.partition/offset headers: lost = expected −
//     distinct, duplicated = records − distinct.
//
// Scenarios: kill (two members; kill -9 of one, restarted 2 s later),
// kill-static (the same with static membership, as sluice run
// --instance-id: the restarted member gets its partitions back at once
// instead of after the 45 s session timeout),
// broker (Kafka — every node — stopped for 5 s and started again), leader
// (on a 3-node cluster: kill -9 of the broker leading partition 0 of the
// bronze topic, started again 5 s later), postgres (PostgreSQL stopped for
// 5 s and started again). broker and postgres restart the
// services of the stack in SLUICE_STACK_DIR with deploy/stack/down.sh and
// up.sh: run them against a private stack (the script does), never one that
// others use.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/bench/internal/benchdb"
	"github.com/sluicehq/sluice/bench/internal/faults"
	"github.com/sluicehq/sluice/bench/internal/sysload"
)

type chaosConfig struct {
	config
	scenarios []string
	stackSrc  string // deploy/stack
}

// chaosResult is one scenario's outcome.
type chaosResult struct {
	scenario            string
	sent                int
	rows, wantRows      int64
	rowsEqual           bool
	dlqRecords, dlqUniq int
	dlqWant             int
	doneAtFault         float64       // fraction of the records done when the fault began
	lagAtFault          int64         // the group's lag when the fault began (0: it hit nothing)
	recovery            time.Duration // fault over → group lag 0
	total               time.Duration
	err                 error
}

func (r chaosResult) lost() int       { return max(0, r.dlqWant-r.dlqUniq) }
func (r chaosResult) duplicated() int { return r.dlqRecords - r.dlqUniq }
func (r chaosResult) pass() bool {
	return r.err == nil && r.lagAtFault > 0 && r.rowsEqual && r.rows == r.wantRows && r.lost() == 0 && r.duplicated() == 0
}

func runChaos(args []string) error {
	cfg := &chaosConfig{}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.IntVar(&cfg.n, "n", 200_000, "records in the corpus")
	fs.Int64Var(&cfg.seed, "seed", 20251121, "corpus seed")
	fs.StringVar(&cfg.workDir, "workdir", "bench/.work/chaos", "directory for the pipelines' logs")
	fs.StringVar(&cfg.out, "out", "", "write the Markdown report to this file")
	scen := fs.String("scenarios", "kill,kill-static,broker,leader,postgres", "scenarios to run (kill, kill-static, broker, leader, postgres)")
	fs.StringVar(&cfg.stackSrc, "stack", "deploy/stack", "the stack scripts (up.sh, down.sh) that restart services for broker and postgres")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Minute, "limit per scenario")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.invalid = 0.10
	cfg.partitions = 6
	cfg.scenarios = strings.Split(*scen, ",")
	if err := cfg.fromEnv(); err != nil {
		return err
	}
	ctx := context.Background()
	logf2("generating %d records", cfg.n)
	p, err := prepare(cfg.seed, cfg.n, cfg.invalid)
	if err != nil {
		return err
	}
	var results []chaosResult
	for _, s := range cfg.scenarios {
		logf2("scenario %s", s)
		r := chaosScenario(ctx, cfg, p, s)
		if r.err != nil {
			logf2("%s: %v", s, r.err)
		}
		results = append(results, r)
	}
	report := chaosReport(cfg, results)
	fmt.Println(report)
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(report), 0o644); err != nil {
			return err
		}
	}
	for _, r := range results {
		if !r.pass() {
			return fmt.Errorf("scenario %s failed", r.scenario)
		}
	}
	return nil
}

// chaosChild is one pipeline process of a scenario.
type chaosChild struct {
	*faults.Child
	metrics string
}

func startChaosChild(cfg *chaosConfig, ts topicSet, dbURL, group, name, instanceID string) (*chaosChild, error) {
	exe, err := childExe(&cfg.config, "silver-pipeline")
	if err != nil {
		return nil, err
	}
	pf, err := cfg.childFlags(ts, dbURL, group)
	if err != nil {
		return nil, err
	}
	pf.instanceID = instanceID
	c, err := faults.Start(exec.Command(exe, pf.args()...), filepath.Join(cfg.workDir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	return &chaosChild{Child: c, metrics: "http://" + pf.opsAddr + "/metrics"}, nil
}

// stack restarts the services of the stack in SLUICE_STACK_DIR.
func (cfg *chaosConfig) stack() faults.Stack { return faults.Stack{Scripts: cfg.stackSrc} }

func chaosScenario(ctx context.Context, cfg *chaosConfig, p *prepared, scenario string) (res chaosResult) {
	res = chaosResult{scenario: scenario, sent: len(p.recs), dlqWant: p.invalid(),
		wantRows: int64(len(p.finalTA) + len(p.finalSA))}
	id := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)
	prefix := "chaos-" + id + "."
	group := prefix + "silver"
	schema, ref := "chaos_"+id, "chaos_"+id+"_ref"
	cl, err := kgo.NewClient(cfg.kopts...)
	if err != nil {
		res.err = err
		return res
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	admin, err := pgx.Connect(ctx, cfg.databaseURL)
	if err != nil {
		res.err = fmt.Errorf("postgres: %w", err)
		return res
	}
	defer func() { admin.Close(context.Background()) }()
	ts, err := silverTopics(ctx, adm, prefix, cfg.partitions)
	if err != nil {
		res.err = err
		return res
	}
	if _, err := produce(ctx, cfg.kopts, ts.bronze, p); err != nil {
		res.err = err
		return res
	}
	url, err := benchdb.FreshSchema(ctx, admin, cfg.databaseURL, schema)
	if err != nil {
		res.err = err
		return res
	}
	// The reference: the rows the corpus implies, loaded as variant c does.
	refURL, err := benchdb.FreshSchema(ctx, admin, cfg.databaseURL, ref)
	if err != nil {
		res.err = err
		return res
	}
	if err := loadReference(ctx, refURL, p); err != nil {
		res.err = err
		return res
	}

	members := 1
	static := scenario == "kill-static"
	if scenario == "kill" || static {
		members = 2
	}
	instance := func(i int) string {
		if !static {
			return ""
		}
		return fmt.Sprintf("chaos-%s-%d", id, i)
	}
	var children []*chaosChild
	defer func() {
		for _, c := range children {
			c.Stop(syscall.SIGTERM)
		}
	}()
	for i := range members {
		c, err := startChaosChild(cfg, ts, url, group, fmt.Sprintf("%s-%s-%d", scenario, id, i), instance(i))
		if err != nil {
			res.err = err
			return res
		}
		children = append(children, c)
	}
	start := time.Now()
	deadline := start.Add(cfg.timeout)
	// Wait until 10 % of the records are done, then inject the fault.
	for {
		var done float64
		for _, c := range children {
			if v, err := faults.ScrapeSum(c.metrics, "sluice_records_done_total", ""); err == nil {
				done += v
			}
		}
		if res.doneAtFault = done / float64(len(p.recs)); res.doneAtFault >= 0.1 {
			break
		}
		if time.Now().After(deadline) {
			res.err = fmt.Errorf("10 %% of the records not done within %s", cfg.timeout)
			return res
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A fault after the work was committed tests nothing.
	if res.lagAtFault, err = faults.GroupLag(ctx, adm, group, ts.bronze); err != nil || res.lagAtFault == 0 {
		res.err = fmt.Errorf("the group had committed everything (lag %d, %v) when the fault began: it would hit nothing (use more records)", res.lagAtFault, err)
		return res
	}
	restartNode := false
	switch scenario {
	case "kill", "kill-static":
		logf2("%s: kill -9 of member 1", scenario)
		children[1].Stop(syscall.SIGKILL)
		time.Sleep(2 * time.Second)
		c, err := startChaosChild(cfg, ts, url, group, fmt.Sprintf("%s-%s-1b", scenario, id), instance(1))
		if err != nil {
			res.err = err
			return res
		}
		children = append(children, c)
	case "leader":
		node, err := faults.KillLeader(ctx, adm, ts.bronze)
		if err != nil {
			res.err = err
			return res
		}
		// The fault is the kill: the cluster goes on with two nodes; the
		// node is started again once the run has recovered.
		logf2("%s: kill -9 of broker %d, the leader of %s/0", scenario, node, ts.bronze)
		restartNode = true
	case "broker", "postgres":
		svc := map[string]string{"broker": "kafka", "postgres": "postgres"}[scenario]
		logf2("%s: stopping %s for 5 s", scenario, svc)
		if err := cfg.stack().Run("down.sh", svc); err != nil {
			res.err = err
			return res
		}
		time.Sleep(5 * time.Second)
		if err := cfg.stack().Run("up.sh", svc); err != nil {
			res.err = err
			return res
		}
		if svc == "postgres" {
			// The admin connection did not survive the restart.
			admin.Close(context.Background())
			if admin, err = pgx.Connect(ctx, cfg.databaseURL); err != nil {
				res.err = fmt.Errorf("postgres after the restart: %w", err)
				return res
			}
		}
	default:
		res.err = fmt.Errorf("unknown scenario %q", scenario)
		return res
	}
	faultOver := time.Now()
	for {
		lag, err := faults.GroupLag(ctx, adm, group, ts.bronze)
		if err == nil && lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			res.err = fmt.Errorf("group lag %d (%v) after %s", lag, err, cfg.timeout)
			for _, c := range children {
				logf2("%s: member %s", scenario, c.Diagnose())
			}
			return res
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.recovery, res.total = time.Since(faultOver), time.Since(start)
	if restartNode {
		logf2("%s: starting the killed broker again", scenario)
		if err := cfg.stack().Run("up.sh", "kafka"); err != nil {
			res.err = err
			return res
		}
	}
	for _, c := range children {
		c.Stop(syscall.SIGTERM)
	}
	got, err := checksums(ctx, admin, schema)
	if err != nil {
		res.err = err
		return res
	}
	want, err := checksums(ctx, admin, ref)
	if err != nil {
		res.err = err
		return res
	}
	res.rows, res.rowsEqual = got.ta.rows+got.sa.rows, got == want
	if res.dlqRecords, res.dlqUniq, err = faults.DLQCoordinates(ctx, adm, cfg.kopts, ts.dlq); err != nil {
		res.err = err
		return res
	}
	for _, s := range []string{schema, ref} {
		_, _ = admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE")
	}
	_, _ = adm.DeleteGroups(ctx, group)
	_, _ = adm.DeleteTopics(ctx, ts.bronze, ts.dlq, ts.flags)
	return res
}

// loadReference fills the reference schema with the rows the corpus
// implies (variant c's load and upsert).
func loadReference(ctx context.Context, url string, p *prepared) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := loadVariantC(ctx, conn, p); err != nil {
		return err
	}
	_, err = runVariantC(ctx, conn)
	return err
}

func chaosReport(cfg *chaosConfig, rs []chaosResult) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	w("# silver under faults (`make chaos`)")
	w("")
	w("Run %s on %s (%d broker(s); topics at the brokers' default replication factor: 3 with min.insync.replicas 2 on 3 nodes); load average %s; %d records (%.0f %% invalid), bronze topic of 6 partitions.", time.Now().UTC().Format(time.RFC3339), cfg.brokers, len(cfg.brokers), sysload.Averages(), cfg.n, cfg.invalid*100)
	w("")
	w("| scenario | sent | done at the fault | lag then | rows (want) | rows equal | DLQ records | lost | duplicated | recovery s | total s | |")
	w("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, r := range rs {
		verdict := passMiss(r.pass())
		if r.err != nil {
			verdict += " (" + r.err.Error() + ")"
		}
		w("| %s | %d | %.0f %% | %d | %d (%d) | %t | %d (want %d) | %d | %d | %.1f | %.1f | %s |", r.scenario, r.sent, 100*r.doneAtFault, r.lagAtFault, r.rows, r.wantRows,
			r.rowsEqual, r.dlqRecords, r.dlqWant, r.lost(), r.duplicated(), r.recovery.Seconds(), r.total.Seconds(), verdict)
	}
	w("")
	w("lost = dead letters expected − distinct source records dead-lettered; duplicated = dead letters − distinct (read_committed). Rows are compared column by column with the rows the corpus implies. lag then = records the group had not committed when the fault began (a fault with nothing left to commit tests nothing and fails). recovery = from the end of the fault (member restarted, service up; for leader, the kill: the cluster goes on with two nodes, and the node is started again afterwards) until the group's lag is 0.")
	return b.String()
}
