package modules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

type job struct {
	ID      string
	Status  string
	Created bool
}

func getOrCreateJob(t *testing.T, ctx context.Context, pool *pgxpool.Pool, ticker string, modules []string, at time.Time) job {
	t.Helper()
	j, err := callGetOrCreateJob(ctx, pool, ticker, modules, at)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// callGetOrCreateJob calls get_or_create_job with the idempotency key of
// ticker, modules and at, and input {"modules": modules}.
func callGetOrCreateJob(ctx context.Context, pool *pgxpool.Pool, ticker string, modules []string, at time.Time) (job, error) {
	key := IdempotencyKey(ticker, JobTypeTickerActivity, modules, at)
	input, err := json.Marshal(map[string]any{"modules": modules})
	if err != nil {
		return job{}, err
	}
	var j job
	if err := pool.QueryRow(ctx, `SELECT job_id::text, status, created FROM get_or_create_job($1, $2, $3, $4)`,
		key, ticker, JobTypeTickerActivity, input).Scan(&j.ID, &j.Status, &j.Created); err != nil {
		return job{}, fmt.Errorf("get_or_create_job(%s): %w", key, err)
	}
	return j, nil
}

// Requests differing in ticker case, module order or repetition within one
// UTC hour share one job; the next hour makes a new one.
func TestGetOrCreateJobIdempotent(t *testing.T) {
	t.Parallel()
	ctx, pool := migrated(t)
	at := time.Date(2025, 1, 6, 14, 5, 0, 0, time.UTC)
	first := getOrCreateJob(t, ctx, pool, "NVDA", []string{"options_flow", "dark_pool"}, at)
	if !first.Created || first.Status != "pending" || first.ID == "" {
		t.Fatalf("first = %+v", first)
	}
	for name, again := range map[string]job{
		"lower case":    getOrCreateJob(t, ctx, pool, "nvda", []string{"options_flow", "dark_pool"}, at),
		"other order":   getOrCreateJob(t, ctx, pool, "NVDA", []string{"dark_pool", "options_flow", "dark_pool"}, at),
		"same UTC hour": getOrCreateJob(t, ctx, pool, "Nvda", []string{"dark_pool", "options_flow"}, at.Add(54*time.Minute).In(time.FixedZone("EST", -5*3600))),
	} {
		if again.Created || again.ID != first.ID {
			t.Errorf("%s: %+v, want job %s not created", name, again, first.ID)
		}
	}
	next := getOrCreateJob(t, ctx, pool, "NVDA", []string{"options_flow", "dark_pool"}, at.Add(55*time.Minute))
	if !next.Created || next.ID == first.ID {
		t.Errorf("next hour: %+v", next)
	}
	var n int
	var ticker string
	var modules []string
	if err := pool.QueryRow(ctx, `SELECT count(*) OVER (), ticker::text, modules FROM analysis_jobs WHERE job_id = $1`, first.ID).
		Scan(&n, &ticker, &modules); err != nil {
		t.Fatal(err)
	}
	if ticker != "NVDA" || len(modules) != 2 || modules[0] != "dark_pool" || modules[1] != "options_flow" {
		t.Errorf("stored job: ticker %s modules %v", ticker, modules)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM analysis_jobs`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d jobs, want 2 (%v)", n, err)
	}

	// A job needs its modules.
	for _, input := range []string{`{}`, `{"modules":[]}`, `{"modules":"dark_pool"}`, `{"modules":[1]}`} {
		_, err := pool.Exec(ctx, `SELECT * FROM get_or_create_job('k-'||$1::text, 'NVDA', 'x', $1::jsonb)`, input)
		if sqlState(err) != "22023" {
			t.Errorf("input %s: %v, want invalid_parameter_value", input, err)
		}
	}
}

// Concurrent calls with one key create one job.
func TestGetOrCreateJobConcurrent(t *testing.T) {
	t.Parallel()
	ctx, pool := migrated(t)
	at := time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)
	const n = 8
	jobs := make([]job, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { jobs[i], errs[i] = callGetOrCreateJob(ctx, pool, "AAPL", []string{"short_interest"}, at) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	created := 0
	for _, j := range jobs {
		if j.Created {
			created++
		}
		if j.ID != jobs[0].ID {
			t.Errorf("jobs %s and %s for one key", j.ID, jobs[0].ID)
		}
	}
	if created != 1 {
		t.Errorf("%d calls created the job, want 1", created)
	}
}

// A job is done when all its modules are ready since its creation, failed
// when all finished and one failed, pending otherwise.
func TestAnalysisJobsStatus(t *testing.T) {
	t.Parallel()
	ctx, pool := migrated(t)
	j := getOrCreateJob(t, ctx, pool, "MSFT", []string{"options_flow", "dark_pool"}, time.Now())
	status := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT status FROM analysis_jobs_status WHERE job_id = $1`, j.ID).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	set := func(module, st, updated string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO ticker_data_modules (ticker, module_id, status, state_epoch, state_version, updated_at)
			SELECT 'msft', $1, $2, 1, 1, `+updated+` FROM analysis_jobs WHERE job_id = $3
			ON CONFLICT (ticker, module_id) DO UPDATE SET status = EXCLUDED.status, updated_at = EXCLUDED.updated_at`,
			module, st, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	if s := status(); s != "pending" {
		t.Fatalf("new job: %s", s)
	}
	for _, step := range []struct {
		module, status, updated, want string
	}{
		{ModuleOptionsFlow, "ready", "created_at - interval '1 second'", "pending"}, // ready before the job: not its refresh
		{ModuleDarkPool, "ready", "created_at", "pending"},
		{ModuleOptionsFlow, "refreshing", "created_at + interval '1 second'", "pending"},
		{ModuleOptionsFlow, "error", "created_at + interval '2 seconds'", "failed"},
		{ModuleOptionsFlow, "ready", "created_at + interval '3 seconds'", "done"},
	} {
		set(step.module, step.status, step.updated)
		if s := status(); s != step.want {
			t.Errorf("after %s %s at %s: %s, want %s", step.module, step.status, step.updated, s, step.want)
		}
	}
	// get_or_create_job reports the derived status of an existing job.
	var st string
	var created bool
	if err := pool.QueryRow(ctx, `SELECT status, created FROM get_or_create_job(
		(SELECT idempotency_key FROM analysis_jobs WHERE job_id = $1), 'MSFT', $2, '{"modules":["dark_pool"]}')`,
		j.ID, JobTypeTickerActivity).Scan(&st, &created); err != nil || st != "done" || created {
		t.Errorf("get_or_create_job of a done job: %s created %v (%v)", st, created, err)
	}
}
