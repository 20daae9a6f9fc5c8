package modules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
)

// DB is what the refresh service needs of PostgreSQL; *pgxpool.Pool
// implements it.
type DB interface {
	Querier
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// dateArg is a data date as a query argument: NULL when empty.
func dateArg(d string) *time.Time {
	t, err := time.Parse(time.DateOnly, d)
	if err != nil {
		return nil
	}
	return &t
}

// cachedAnalysis returns the stored analysis of ticker × module with
// inputHash that is still current at now (expires_at not before now), if
// any.
func cachedAnalysis(ctx context.Context, db DB, ticker, module, inputHash string, now time.Time) (*Analysis, error) {
	var a Analysis
	var version *int32
	var analyzed, expires time.Time
	err := db.QueryRow(ctx, `SELECT analysis_version, analyzed_at, expires_at FROM unit_analyses
WHERE ticker = $1 AND module_id = $2 AND input_hash = $3 AND expires_at >= $4`,
		ticker, module, inputHash, now).Scan(&version, &analyzed, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, pgErr("read unit_analyses", err)
	}
	a.InputHash, a.AnalyzedAt, a.ExpiresAt = inputHash, utc(analyzed), utc(expires)
	a.AnalysisVersion = 1
	if version != nil {
		a.AnalysisVersion = int(*version)
	}
	return &a, nil
}

// storedSnapshot returns the payload of ticker × module stored under
// inputHash; ok is false when there is none.
func storedSnapshot(ctx context.Context, db DB, ticker, module, inputHash string) (json.RawMessage, bool, error) {
	var payload []byte
	err := db.QueryRow(ctx, `SELECT payload::text FROM module_snapshots WHERE ticker = $1 AND module_id = $2 AND input_hash = $3`,
		ticker, module, inputHash).Scan(&payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, pgErr("read module_snapshots", err)
	}
	return payload, true, nil
}

// sinkWrite is what one refresh writes to PostgreSQL in one transaction:
// the snapshot when fetched (nil payload: analysis only), the analysis
// when computed (nil result: reused or failed).
type sinkWrite struct {
	ticker, module, inputHash, dataDate string
	fetchedAt                           time.Time
	payload                             json.RawMessage
	result                              json.RawMessage
	analyzedAt, analysisExpires         time.Time
}

// write upserts, in tx (the caller commits), the snapshot (keyed by input hash: a payload seen before
// only moves its fetched_at) and the analysis (on the input-hash index: a
// re-analysis of a known hash keeps its version; a new hash gets 1 + the
// hashes already analysed for ticker, module and data date) and returns
// the analysis's version (0 when none was written).
func (w sinkWrite) write(ctx context.Context, tx pgx.Tx) (version int, err error) {
	date := dateArg(w.dataDate)
	if w.payload != nil {
		if _, err := tx.Exec(ctx, `INSERT INTO module_snapshots (ticker, module_id, input_hash, data_date, fetched_at, payload)
VALUES ($1, $2, $3, $4, $5, $6::jsonb)
ON CONFLICT (ticker, module_id, input_hash) DO UPDATE SET fetched_at = GREATEST(module_snapshots.fetched_at, EXCLUDED.fetched_at)`,
			w.ticker, w.module, w.inputHash, date, w.fetchedAt, string(w.payload)); err != nil {
			return 0, pgErr("upsert module_snapshots", err)
		}
	}
	if w.result != nil {
		var v int32
		if err := tx.QueryRow(ctx, `INSERT INTO unit_analyses (ticker, module_id, data_date, analysis_version, input_hash, result, analyzed_at, expires_at)
VALUES ($1, $2, $3::date, (SELECT 1 + count(DISTINCT u.input_hash) FROM unit_analyses u
	WHERE u.ticker = $1 AND u.module_id = $2 AND u.data_date IS NOT DISTINCT FROM $3::date AND u.input_hash IS DISTINCT FROM $4),
	$4, $5::jsonb, $6, $7)
ON CONFLICT (ticker, module_id, input_hash) WHERE input_hash IS NOT NULL
DO UPDATE SET result = EXCLUDED.result, analyzed_at = EXCLUDED.analyzed_at, expires_at = EXCLUDED.expires_at
RETURNING analysis_version`,
			w.ticker, w.module, date, w.inputHash, string(w.result), w.analyzedAt, w.analysisExpires).Scan(&v); err != nil {
			return 0, pgErr("upsert unit_analyses", err)
		}
		version = int(v)
	}
	return version, nil
}

// PostgresRetryWait is the wait before a refresh tries PostgreSQL again
// after a failure that is not a refusal of its values.
const PostgresRetryWait = 2 * time.Second

// pgErr classifies a PostgreSQL failure of the refresh: a refusal of the
// values is sink_rejected with rule pg.<sqlstate>; anything else
// (connections, deadlocks, timeouts, a missing table) waits
// PostgresRetryWait and is tried again without spending an attempt, as
// the runtime's sinks retry until the database is back: a database outage
// does not dead-letter requests.
func pgErr(what string, err error) error {
	err = fmt.Errorf("modules: %s: %w", what, err)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pgsink.IsPermanent(err) {
		return stages.DeadLetter(stages.ReasonSinkRejected, "pg."+pe.Code, err)
	}
	return stages.Wait(PostgresRetryWait, err)
}

// pendingWrite is the cause of a wait after a fetched refresh could not be
// written: the next attempt of the request (stages.Msg.PrevErr) writes
// this snapshot instead of calling the upstream again.
type pendingWrite struct {
	key, hash string
	snap      Snapshot
	err       error
}

func (p *pendingWrite) Error() string { return p.err.Error() }
func (p *pendingWrite) Unwrap() error { return p.err }

func utc(t time.Time) *time.Time {
	t = t.UTC()
	return &t
}
