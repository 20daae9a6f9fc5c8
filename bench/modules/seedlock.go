package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// seedSchema is the variant (i) schema: the seed's ticker_data_modules
// (status, fetched_at, expires_at), its raw cache, and a lock table of its
// own whose conditional UPDATE … RETURNING is acquire_refresh_lock.
const seedSchema = `
CREATE SCHEMA seedlock;
CREATE TABLE seedlock.tdm (ticker TEXT, module_id TEXT, status TEXT NOT NULL DEFAULT 'missing',
    fetched_at TIMESTAMPTZ, expires_at TIMESTAMPTZ, PRIMARY KEY (ticker, module_id));
CREATE TABLE seedlock.snapshots (ticker TEXT, module_id TEXT, fetched_at TIMESTAMPTZ NOT NULL, payload JSONB NOT NULL,
    PRIMARY KEY (ticker, module_id));
CREATE TABLE seedlock.locks (ticker TEXT, module_id TEXT, lock_owner TEXT, lock_until TIMESTAMPTZ,
    PRIMARY KEY (ticker, module_id));`

// seedLock is the seed's design ported to Go: a request reads the key's
// freshness and returns when fresh; else it tries the lock (a conditional
// UPDATE of the lock row whose lease ran out), and without it returns the
// current state; with it, it re-checks freshness, sets refreshing, calls
// the upstream, stores the snapshot, sets ready (fetched_at = the time the
// data is of) and releases the lock by owner. Every statement is its own
// transaction (autocommit), as in the seed.
type seedLock struct {
	pool      *pgxpool.Pool
	up        *upstream
	lease     time.Duration
	threshold time.Duration
	ttl       time.Duration

	commits         atomic.Int64 // statements run (each one commit)
	staleOverwrites atomic.Int64 // ready writes moving fetched_at backwards
	lockMisses      atomic.Int64 // requests answered without the lock
}

func newSeedLock(pool *pgxpool.Pool, up *upstream, lease time.Duration) *seedLock {
	return &seedLock{pool: pool, up: up, lease: lease, threshold: 15 * time.Minute, ttl: time.Hour}
}

// setup creates the schema and one tdm row (status missing) and one free
// lock row per key.
func (s *seedLock) setup(ctx context.Context, keys int) error {
	if _, err := s.pool.Exec(ctx, seedSchema+readyTriggerSQL("seedlock.tdm")); err != nil {
		return fmt.Errorf("seedlock schema: %w", err)
	}
	tickers := make([]string, keys)
	for k := range keys {
		tickers[k] = benchTicker(k)
	}
	for _, table := range []string{"tdm", "locks"} {
		if _, err := s.pool.Exec(ctx, `INSERT INTO seedlock.`+table+` (ticker, module_id) SELECT t, $2 FROM unnest($1::text[]) t`,
			tickers, benchModule); err != nil {
			return fmt.Errorf("seedlock %s rows: %w", table, err)
		}
	}
	return nil
}

// fresh reads the key's freshness as the seed's view derives it.
func (s *seedLock) fresh(ctx context.Context, ticker string) (bool, error) {
	s.commits.Add(1)
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT status = 'ready' AND now() <= expires_at AND now() - fetched_at <= make_interval(secs => $3::float8)
FROM seedlock.tdm WHERE ticker = $1 AND module_id = $2`, ticker, benchModule, s.threshold.Seconds()).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", ticker, err)
	}
	return ok, nil
}

// handle serves one request of ticker; it reports whether the request
// found or made the key fresh.
func (s *seedLock) handle(ctx context.Context, ticker, owner string) (bool, error) {
	if ok, err := s.fresh(ctx, ticker); err != nil || ok {
		return ok, err
	}
	// acquire_refresh_lock(ticker, module_id, owner, lease)
	s.commits.Add(1)
	var got bool
	err := s.pool.QueryRow(ctx, `UPDATE seedlock.locks SET lock_owner = $3, lock_until = now() + make_interval(secs => $4::float8)
WHERE ticker = $1 AND module_id = $2 AND (lock_until IS NULL OR lock_until < now()) RETURNING true`,
		ticker, benchModule, owner, s.lease.Seconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		s.lockMisses.Add(1)
		return false, nil // the seed returns the current state
	}
	if err != nil {
		return false, fmt.Errorf("acquire %s: %w", ticker, err)
	}
	defer func() {
		// release_refresh_lock(ticker, module_id, owner), the seed's finally
		s.commits.Add(1)
		_, _ = s.pool.Exec(context.WithoutCancel(ctx), `UPDATE seedlock.locks SET lock_owner = NULL, lock_until = NULL
WHERE ticker = $1 AND module_id = $2 AND lock_owner = $3`, ticker, benchModule, owner)
	}()
	if ok, err := s.fresh(ctx, ticker); err != nil || ok { // the next holder re-checks
		return ok, err
	}
	s.commits.Add(1)
	if _, err := s.pool.Exec(ctx, `UPDATE seedlock.tdm SET status = 'refreshing' WHERE ticker = $1 AND module_id = $2`,
		ticker, benchModule); err != nil {
		return false, fmt.Errorf("refreshing %s: %w", ticker, err)
	}
	snap, err := s.up.Fetch(ctx, ticker, benchModule)
	if err != nil {
		return false, fmt.Errorf("upstream %s: %w", ticker, err)
	}
	var p upstreamPayload
	if err := json.Unmarshal(snap.Payload, &p); err != nil {
		return false, fmt.Errorf("upstream payload %s: %w", ticker, err)
	}
	s.commits.Add(1)
	if _, err := s.pool.Exec(ctx, `INSERT INTO seedlock.snapshots (ticker, module_id, fetched_at, payload) VALUES ($1, $2, $3, $4)
ON CONFLICT (ticker, module_id) DO UPDATE SET fetched_at = EXCLUDED.fetched_at, payload = EXCLUDED.payload`,
		ticker, benchModule, p.AsOf, snap.Payload); err != nil {
		return false, fmt.Errorf("snapshot %s: %w", ticker, err)
	}
	// ready, unconditionally (the seed's fault): the previous fetched_at is
	// read under the row lock to count writes that move it backwards.
	s.commits.Add(1)
	var prev *time.Time
	if err := s.pool.QueryRow(ctx, `WITH prev AS (SELECT fetched_at FROM seedlock.tdm WHERE ticker = $1 AND module_id = $2 FOR UPDATE)
UPDATE seedlock.tdm t SET status = 'ready', fetched_at = $3, expires_at = $3::timestamptz + make_interval(secs => $4::float8)
FROM prev WHERE t.ticker = $1 AND t.module_id = $2 RETURNING prev.fetched_at`,
		ticker, benchModule, p.AsOf, s.ttl.Seconds()).Scan(&prev); err != nil {
		return false, fmt.Errorf("ready %s: %w", ticker, err)
	}
	if prev != nil && p.AsOf.Before(*prev) {
		s.staleOverwrites.Add(1)
	}
	return true, nil
}

// runSeedLock runs the workload arrivals over keys with workers
// goroutines, each request answered at its due time or later, and returns
// the measurements. Request latency runs from the due time to the answer
// (queueing included).
func runSeedLock(ctx context.Context, s *seedLock, arrivals []arrival, workers int) (result, error) {
	queue := make(chan arrival, len(arrivals))
	start := time.Now()
	go func() {
		defer close(queue)
		for _, a := range arrivals {
			if d := time.Until(start.Add(a.at)); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return
				}
			}
			queue <- a
		}
	}()
	lat := make([][]time.Duration, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			owner := fmt.Sprintf("worker-%d", w)
			for a := range queue {
				if _, err := s.handle(ctx, benchTicker(a.key), owner); err != nil && errs[w] == nil {
					errs[w] = err
				}
				lat[w] = append(lat[w], time.Since(start.Add(a.at)))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return result{}, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	dupKeys, dupCalls := s.up.duplicates()
	return result{
		requests: len(all), elapsed: time.Since(start), start: start,
		upstreamDone: s.up.doneAfter(start), upstreamCalls: s.up.calls.Load(), slowCalls: s.up.slowCalls.Load(), dupKeys: dupKeys, dupCalls: dupCalls,
		p50: percentile(all, 0.50), p99: percentile(all, 0.99), ownCommits: s.commits.Load(),
		staleOverwrites: s.staleOverwrites.Load(), lockMisses: s.lockMisses.Load(),
	}, nil
}
