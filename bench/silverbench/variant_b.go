package main

// Variant b: a Go port of the seed's worker (seed 000, silver_logic_v1 §2
// and §8), with pgx instead of psycopg. One iteration of a worker is the
// seed's main():
//
//  1. pg_try_advisory_lock(hashtext('silver_consume')); when the lock is
//     taken by the other worker the seed exits 0 and waits to be started
//     again — here the worker sleeps lockRetry and tries again;
//  2. in one transaction: SELECT … FROM task_q WHERE status='ready' ORDER BY
//     priority, first_seen LIMIT 500 FOR UPDATE SKIP LOCKED;
//  3. for each task, in the returned order: parse and validate (silver.Decode
//     and the silver validator: the same 14 rules as the pipeline), then
//     either one single-row INSERT … ON CONFLICT DO UPDATE into ta_silver or
//     sa_silver with the merge SQL of the sink's table description, followed
//     by DELETE FROM task_q WHERE id=$1; or INSERT INTO task_q_dlq and
//     UPDATE task_q SET status='dlq';
//  4. backlog control: SELECT count(*) FROM task_q WHERE status='ready' and
//     the UPSERT of control_flags('SCRAPE_SLOW');
//  5. COMMIT, then pg_advisory_unlock.
//
// A worker stops when it holds the lock and finds no ready task.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
)

// seedDDL is the seed's task queue DDL (silver_logic_v1 §7), verbatim in
// substance. ta_silver, sa_silver and control_flags come from the sluice
// migrations, which follow the same DDL.
const seedDDL = `
CREATE TABLE IF NOT EXISTS task_q (
  id BIGSERIAL PRIMARY KEY,
  task_type TEXT NOT NULL,
  payload JSONB NOT NULL,
  status TEXT NOT NULL DEFAULT 'ready',
  priority INT NOT NULL DEFAULT 100,
  first_seen TIMESTAMPTZ NOT NULL DEFAULT now(),
  last_attempt TIMESTAMPTZ
);
CREATE INDEX IF NOT EXISTS idx_task_q_status ON task_q(status, priority, first_seen) WHERE status = 'ready';
CREATE TABLE IF NOT EXISTS task_q_dlq (
  id BIGSERIAL PRIMARY KEY,
  task_id BIGINT,
  reason TEXT NOT NULL,
  rule_id TEXT,
  payload JSONB,
  error_msg TEXT,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);`

const (
	seedBatchSize        = 500
	seedBacklogThreshold = 10_000
	seedWorkerCount      = 2
	lockRetry            = 5 * time.Millisecond
)

// fetchSQL is the seed's fetch_batch. The outer ORDER BY is an addition: the
// seed's join returns rows in no guaranteed order, and records of one key
// must be applied in queue order for "newest wins" to hold.
const fetchSQL = `WITH cte AS (
    SELECT id FROM task_q
    WHERE status='ready'
    ORDER BY priority, first_seen
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
SELECT t.id, t.task_type, t.payload, t.first_seen
FROM task_q t JOIN cte ON t.id = cte.id
ORDER BY t.priority, t.first_seen`

// singleRowUpsert renders the seed's per-task upsert for table:
// INSERT … VALUES ($1…) ON CONFLICT (key) DO UPDATE SET <the table's
// merge expressions>, <touch> = now(). The SET clause is the sink's, so
// both variants merge identically.
func singleRowUpsert[T any](t pgsink.Table[T]) string {
	var b strings.Builder
	ph := make([]string, len(t.Columns))
	for i := range ph {
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	fmt.Fprintf(&b, "INSERT INTO %s AS t (%s) VALUES (%s) ON CONFLICT (%s) DO UPDATE SET ",
		t.Name, strings.Join(t.Columns, ", "), strings.Join(ph, ", "), strings.Join(t.Key, ", "))
	var sets []string
	for _, s := range t.Update {
		sets = append(sets, s.Column+" = "+s.Expr)
	}
	for _, c := range t.Touch {
		sets = append(sets, c+" = now()")
	}
	b.WriteString(strings.Join(sets, ", "))
	return b.String()
}

// loadTaskQueue creates the seed's tables in the schema of conn and loads
// the corpus into task_q in corpus order: task_type from the envelope
// (empty when absent or not a string), payload = the whole envelope as JSONB
// (a record that is not JSON at all cannot be stored in a JSONB column; it
// is stored as a JSON string holding its bytes so that it still reaches the
// worker and is dead-lettered as decode_error, as in the pipeline),
// first_seen = the record's timestamp.
func loadTaskQueue(ctx context.Context, conn *pgx.Conn, p *prepared) error {
	if _, err := conn.Exec(ctx, seedDDL); err != nil {
		return fmt.Errorf("seed DDL: %w", err)
	}
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= len(p.recs) {
			return nil, nil
		}
		rec := p.recs[i]
		var top struct {
			TaskType any `json:"task_type"`
		}
		payload := rec.Value
		taskType := ""
		if json.Valid(rec.Value) {
			if json.Unmarshal(rec.Value, &top) == nil {
				if s, ok := top.TaskType.(string); ok {
					taskType = s
				}
			}
		} else {
			payload, _ = json.Marshal(string(rec.Value))
		}
		row := []any{taskType, string(payload), p.recordTime(i)}
		i++
		return row, nil
	})
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"task_q"}, []string{"task_type", "payload", "first_seen"}, src); err != nil {
		return fmt.Errorf("load task_q: %w", err)
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE task_q"); err != nil {
		return fmt.Errorf("analyze task_q: %w", err)
	}
	return nil
}

// resultB is the outcome of variant b.
type resultB struct {
	Run        time.Duration `json:"run"`
	Batches    int64         `json:"batches"`
	Tasks      int64         `json:"tasks"`
	LockMisses int64         `json:"lock_misses"`
	Backlog    time.Duration `json:"backlog"` // time in the backlog check (the lock serialises the workers, so this is wall time)
	Deadlocks  int64         `json:"deadlocks"`
	PeakRSSKB  int64         `json:"peak_rss_kb"`
	CPU        time.Duration `json:"cpu"`
	machine    float64
	cpuSplit   string
}

type seedStats struct {
	batches, tasks, lockMisses, backlogNs, deadlocks atomic.Int64
}

// runSeed is the `seed` subcommand: the seed port's workers, run in their
// own process (like the pipeline, and away from the harness's heap). It
// prints a resultB as JSON on stdout.
func runSeed(args []string) error {
	fs := flag.NewFlagSet("seed", flag.ContinueOnError)
	dbURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL with search_path = the loaded schema")
	noLock := fs.Bool("no-lock", false, "skip the advisory lock (not the seed's design; informational)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := seedWorkers(ctx, *dbURL, *noLock)
	if err != nil {
		return err
	}
	res.PeakRSSKB = procStatusKB(os.Getpid(), "VmHWM")
	res.CPU = procCPU(os.Getpid())
	return json.NewEncoder(os.Stdout).Encode(res)
}

// runVariantB runs the seed port as a child process on dbURL (search_path =
// the schema loaded by loadTaskQueue) until task_q has no ready task.
func runVariantB(ctx context.Context, cfg *config, dbURL string, noLock bool) (*resultB, error) {
	exe, err := childExe(cfg, "seed-workers")
	if err != nil {
		return nil, err
	}
	args := []string{"seed", "--database-url", dbURL, fmt.Sprintf("--no-lock=%t", noLock)}
	if cfg.profile {
		args = append(args, "--cpuprofile", filepath.Join(cfg.workDir, "seed.cpu.pprof"))
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = os.Stderr
	quiesce()
	cpu0, sampler := machineCPU(), startCPUSampler()
	out, err := cmd.Output()
	split := sampler.stop()
	if err != nil {
		return nil, fmt.Errorf("seed workers: %w", err)
	}
	res := &resultB{}
	if err := json.Unmarshal(out, res); err != nil {
		return nil, fmt.Errorf("seed workers: result %q: %w", out, err)
	}
	res.machine, res.cpuSplit = machineCPU().busySince(cpu0), cpuSplit(split)
	return res, nil
}

// seedWorkers runs seedWorkers workers until task_q has no ready task.
func seedWorkers(ctx context.Context, dbURL string, noLock bool) (*resultB, error) {
	conns := make([]*pgx.Conn, seedWorkerCount)
	for i := range conns {
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			return nil, err
		}
		defer c.Close(context.Background())
		conns[i] = c
	}
	var st seedStats
	var wg sync.WaitGroup
	errs := make([]error, seedWorkerCount)
	start := time.Now()
	stopLog := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopLog:
				return
			case <-t.C:
				logf2("  b: %d tasks in %d batches after %s", st.tasks.Load(), st.batches.Load(), time.Since(start).Round(time.Second))
			}
		}
	}()
	for i, c := range conns {
		wg.Go(func() { errs[i] = seedWorker(ctx, c, &st, noLock) })
	}
	wg.Wait()
	close(stopLog)
	res := &resultB{Run: time.Since(start), Batches: st.batches.Load(), Tasks: st.tasks.Load(),
		LockMisses: st.lockMisses.Load(), Backlog: time.Duration(st.backlogNs.Load()), Deadlocks: st.deadlocks.Load()}
	for _, err := range errs {
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// seedWorker loops over seed batches. With noLock (the informational
// variant, not the seed's design) it skips the advisory lock, so both
// workers consume concurrently; a deadlock between them rolls the batch
// back and it is fetched again, as the seed's rollback path would.
func seedWorker(ctx context.Context, conn *pgx.Conn, st *seedStats, noLock bool) error {
	v := silver.NewValidator()
	taSQL, saSQL := singleRowUpsert(silver.TATable()), singleRowUpsert(silver.SATable())
	taValues, saValues := silver.TATable().Values, silver.SATable().Values
	for noLock {
		n, err := seedBatch(ctx, conn, v, taSQL, saSQL, taValues, saValues, st)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001") {
			st.deadlocks.Add(1)
			continue
		}
		if err != nil || n == 0 {
			return err
		}
	}
	for {
		var locked bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", "silver_consume").Scan(&locked); err != nil {
			return fmt.Errorf("advisory lock: %w", err)
		}
		if !locked {
			st.lockMisses.Add(1)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(lockRetry):
			}
			continue
		}
		n, err := seedBatch(ctx, conn, v, taSQL, saSQL, taValues, saValues, st)
		if _, uerr := conn.Exec(ctx, "SELECT pg_advisory_unlock(hashtext($1))", "silver_consume"); uerr != nil && err == nil {
			err = fmt.Errorf("advisory unlock: %w", uerr)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

type seedTask struct {
	id        int64
	taskType  string
	payload   []byte
	firstSeen time.Time
}

// seedBatch is one locked iteration of the seed's main(): it returns the
// number of tasks it processed.
func seedBatch(ctx context.Context, conn *pgx.Conn, v *silver.Validator, taSQL, saSQL string,
	taValues func(silver.TARow) []any, saValues func(silver.SARow) []any, st *seedStats) (n int, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	rows, err := tx.Query(ctx, fetchSQL, seedBatchSize)
	if err != nil {
		return 0, fmt.Errorf("fetch batch: %w", err)
	}
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (seedTask, error) {
		var t seedTask
		err := r.Scan(&t.id, &t.taskType, &t.payload, &t.firstSeen)
		return t, err
	})
	if err != nil {
		return 0, fmt.Errorf("fetch batch: %w", err)
	}
	for _, t := range tasks {
		raw := t.payload
		if len(raw) > 0 && raw[0] == '"' { // a record that was not JSON (see loadTaskQueue)
			var s string
			if json.Unmarshal(raw, &s) == nil {
				raw = []byte(s)
			}
		}
		env, verr := silver.Decode(nil, raw)
		var row silver.Row
		if verr == nil {
			row, verr = v.Transform(env, t.firstSeen)
		}
		if verr != nil {
			c := stages.Classify(verr)
			if _, err := tx.Exec(ctx, `INSERT INTO task_q_dlq(task_id, reason, rule_id, payload, error_msg, created_at)
				VALUES ($1, $2, $3, $4::jsonb, $5, now())`, t.id, string(c.Reason), c.Rule, string(t.payload), verr.Error()); err != nil {
				return 0, fmt.Errorf("task %d: dlq insert: %w", t.id, err)
			}
			if _, err := tx.Exec(ctx, "UPDATE task_q SET status='dlq', last_attempt=now() WHERE id=$1", t.id); err != nil {
				return 0, fmt.Errorf("task %d: mark dlq: %w", t.id, err)
			}
			continue
		}
		var tag pgconn.CommandTag
		switch {
		case row.TA != nil:
			tag, err = tx.Exec(ctx, taSQL, taValues(*row.TA)...)
		case row.SA != nil:
			tag, err = tx.Exec(ctx, saSQL, saValues(*row.SA)...)
		}
		if err != nil {
			return 0, fmt.Errorf("task %d: upsert: %w", t.id, err)
		}
		if tag.RowsAffected() != 1 {
			return 0, fmt.Errorf("task %d: upsert affected %d rows", t.id, tag.RowsAffected())
		}
		if _, err := tx.Exec(ctx, "DELETE FROM task_q WHERE id=$1", t.id); err != nil {
			return 0, fmt.Errorf("task %d: delete: %w", t.id, err)
		}
	}
	// backlog_control (AC7), after every batch, inside the transaction.
	b0 := time.Now()
	var ready int64
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM task_q WHERE status='ready'").Scan(&ready); err != nil {
		return 0, fmt.Errorf("backlog count: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO control_flags(name, value, updated_at) VALUES ('SCRAPE_SLOW', $1, now())
		ON CONFLICT (name) DO UPDATE SET value=EXCLUDED.value, updated_at=now()`, ready > seedBacklogThreshold); err != nil {
		return 0, fmt.Errorf("backlog flag: %w", err)
	}
	st.backlogNs.Add(int64(time.Since(b0)))
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	if len(tasks) > 0 {
		st.batches.Add(1)
		st.tasks.Add(int64(len(tasks)))
	}
	return len(tasks), nil
}
