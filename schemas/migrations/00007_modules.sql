-- The modules pipeline (seed 003, package pipelines/modules): upstream data
-- and analyses cached per ticker × module, freshness derived from the
-- catalog's thresholds rather than stored, idempotent analysis jobs.
--
-- Tickers are CITEXT: 'nvda' and 'NVDA' are one key. An extension exists
-- once per database, so citext is installed into pg_catalog, where every
-- schema migrated in the database sees its type and operators; installed
-- into the first migrated schema it would be invisible to the others and
-- dropped with that schema. Where citext is installed already (in public,
-- say) that installation is used, and a schema whose search_path does not
-- reach it fails here on "type citext does not exist". The advisory lock
-- serialises the first installation between schemas migrated at once
-- (the migration lock is per schema).
--
-- ticker_data_modules has one writer, the modules-mirror service, which
-- applies the state records of the modules.state topic fenced by
-- (state_epoch, state_version); there are no lock functions (a second
-- writer would defeat the fence): a refresh lease is the state's lease,
-- mirrored into refresh_lock_until/refresh_lock_owner.

-- +goose Up
SELECT pg_advisory_xact_lock(7318650274836111506);
CREATE EXTENSION IF NOT EXISTS citext SCHEMA pg_catalog;

-- The modules, their freshness threshold (older data is stale), the TTLs of
-- raw data and of analyses, and how old data may be to be served when
-- nothing fresher exists (NULL: never). Hours.
CREATE TABLE analysis_catalog (
    module_id                 TEXT PRIMARY KEY,
    freshness_threshold_hours DECIMAL(5,2),
    data_ttl_hours            DECIMAL(5,2) NOT NULL DEFAULT 24.0,
    analysis_ttl_hours        DECIMAL(5,2) NOT NULL DEFAULT 24.0,
    max_stale_hours           DECIMAL(5,2) DEFAULT NULL,
    enabled                   BOOLEAN NOT NULL DEFAULT true
);

-- options_flow's thresholds and TTLs and short_interest's threshold are the
-- seed's; the other values are choices.
INSERT INTO analysis_catalog VALUES
    ('options_flow',   0.25,  1.0,  0.5,  4.0, true),
    ('short_interest', 1.0,  24.0, 24.0, 72.0, true),
    ('dark_pool',      1.0,  24.0, 24.0, NULL, true),
    ('price_action',   0.25,  1.0,  0.5, NULL, true);

-- The state of each ticker × module. status is stored
-- (missing|refreshing|ready|error); stale/expired are derived in
-- ticker_modules_status. data_date is NULL for intraday data.
CREATE TABLE ticker_data_modules (
    ticker             CITEXT,
    module_id          TEXT REFERENCES analysis_catalog,
    status             TEXT NOT NULL DEFAULT 'missing'
                       CHECK (status IN ('missing', 'refreshing', 'ready', 'error')),
    data_date          DATE,
    fetched_at         TIMESTAMPTZ,
    expires_at         TIMESTAMPTZ,
    input_hash         TEXT,
    refresh_lock_until TIMESTAMPTZ,
    refresh_lock_owner TEXT,
    last_error         TEXT,
    error_count        INT NOT NULL DEFAULT 0,
    state_epoch        BIGINT NOT NULL,
    state_version      BIGINT NOT NULL,
    updated_at         TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (ticker, module_id)
);

-- Raw upstream data, one row per distinct content (input_hash).
CREATE TABLE module_snapshots (
    ticker     CITEXT,
    module_id  TEXT,
    input_hash TEXT,
    data_date  DATE,
    fetched_at TIMESTAMPTZ NOT NULL,
    payload    JSONB NOT NULL,
    PRIMARY KEY (ticker, module_id, input_hash)
);

-- Analyses of one module's data. A UNIQUE constraint cannot have a WHERE
-- clause, and NULL data_dates (intraday) never conflict in the versioned
-- constraint: deduplication by content rests on the partial unique index
-- on input_hash.
CREATE TABLE unit_analyses (
    id               BIGSERIAL PRIMARY KEY,
    ticker           CITEXT NOT NULL,
    module_id        TEXT NOT NULL,
    data_date        DATE,
    analysis_version INT DEFAULT 1,
    input_hash       TEXT,
    result           JSONB NOT NULL,
    analyzed_at      TIMESTAMPTZ NOT NULL,
    expires_at       TIMESTAMPTZ NOT NULL,
    CONSTRAINT unique_unit_analysis UNIQUE (ticker, module_id, data_date, analysis_version)
);
CREATE UNIQUE INDEX unique_unit_analysis_hash ON unit_analyses (ticker, module_id, input_hash)
    WHERE input_hash IS NOT NULL;

-- Analysis jobs, one per idempotency key
-- {TICKER}_{job_type}_{sorted unique modules joined by ','}_{UTC hour YYYY-MM-DDTHH}.
-- Their status is derived (analysis_jobs_status).
CREATE TABLE analysis_jobs (
    job_id          UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    idempotency_key TEXT NOT NULL UNIQUE,
    ticker          CITEXT NOT NULL,
    job_type        TEXT NOT NULL,
    modules         TEXT[] NOT NULL,
    input_data      JSONB NOT NULL DEFAULT '{}',
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- freshness_status: missing (status missing or error), expired (past
-- expires_at), stale (fetched longer ago than the module's threshold),
-- fresh (ready), else unknown; the CASE is the seed's. can_serve_stale:
-- the data is no older than max_stale_hours.
CREATE VIEW ticker_modules_status AS
SELECT tdm.ticker, tdm.module_id, tdm.status, tdm.data_date, tdm.fetched_at, tdm.expires_at, tdm.last_error,
    CASE
        WHEN tdm.status = 'missing' OR tdm.status = 'error' THEN 'missing'
        WHEN tdm.expires_at IS NOT NULL AND NOW() > tdm.expires_at THEN 'expired'
        WHEN tdm.fetched_at IS NOT NULL AND ac.freshness_threshold_hours IS NOT NULL
             AND NOW() - tdm.fetched_at > (ac.freshness_threshold_hours || ' hours')::INTERVAL THEN 'stale'
        WHEN tdm.status = 'ready' THEN 'fresh'
        ELSE 'unknown'
    END AS freshness_status,
    (ac.max_stale_hours IS NOT NULL AND tdm.fetched_at IS NOT NULL
     AND NOW() - tdm.fetched_at <= (ac.max_stale_hours || ' hours')::INTERVAL) AS can_serve_stale,
    (tdm.status = 'refreshing' AND COALESCE(tdm.refresh_lock_until > NOW(), false)) AS refresh_in_progress
FROM ticker_data_modules tdm
JOIN analysis_catalog ac USING (module_id);

-- A job is done when every module of it is ready and was written after
-- the job was created, failed when every one was written since and one is
-- in error, pending otherwise (a module without a row is pending).
CREATE VIEW analysis_jobs_status AS
SELECT j.job_id, j.idempotency_key, j.ticker, j.job_type, j.modules, j.input_data, j.created_at,
    CASE
        WHEN m.ready = m.total THEN 'done'
        WHEN m.ready + m.failed = m.total THEN 'failed'
        ELSE 'pending'
    END AS status
FROM analysis_jobs j
CROSS JOIN LATERAL (
    SELECT count(*) AS total,
        count(*) FILTER (WHERE tdm.status = 'ready' AND tdm.updated_at >= j.created_at) AS ready,
        count(*) FILTER (WHERE tdm.status = 'error' AND tdm.updated_at >= j.created_at) AS failed
    FROM (SELECT DISTINCT unnest(j.modules)) AS jm(module_id)
    LEFT JOIN ticker_data_modules tdm ON tdm.ticker = j.ticker AND tdm.module_id = jm.module_id
) m;

-- get_or_create_job returns the job of p_key, creating it unless it exists
-- (created tells which), with its derived status. The job's modules are
-- p_input's "modules" (a non-empty JSON array of strings), sorted and
-- deduplicated. Concurrent calls with one key create one job.
-- +goose StatementBegin
CREATE FUNCTION get_or_create_job(p_key TEXT, p_ticker CITEXT, p_job_type TEXT, p_input JSONB)
RETURNS TABLE (job_id UUID, status TEXT, created BOOLEAN)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_modules TEXT[];
    v_new     UUID;
BEGIN
    IF jsonb_typeof(p_input -> 'modules') IS DISTINCT FROM 'array'
       OR jsonb_array_length(p_input -> 'modules') = 0
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(p_input -> 'modules') e WHERE jsonb_typeof(e) <> 'string') THEN
        RAISE EXCEPTION 'get_or_create_job: input "modules" must be a non-empty array of strings, got %', p_input -> 'modules'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT array_agg(DISTINCT m ORDER BY m) INTO v_modules
    FROM jsonb_array_elements_text(p_input -> 'modules') AS e(m);

    INSERT INTO analysis_jobs AS j (idempotency_key, ticker, job_type, modules, input_data)
    VALUES (p_key, p_ticker, p_job_type, v_modules, p_input)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING j.job_id INTO v_new;

    RETURN QUERY
    SELECT s.job_id, s.status, v_new IS NOT NULL
    FROM analysis_jobs_status s
    WHERE s.idempotency_key = p_key;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- citext stays: other schemas of the database may use it.
DROP FUNCTION IF EXISTS get_or_create_job(TEXT, CITEXT, TEXT, JSONB);
DROP VIEW IF EXISTS analysis_jobs_status;
DROP VIEW IF EXISTS ticker_modules_status;
DROP TABLE IF EXISTS analysis_jobs;
DROP TABLE IF EXISTS unit_analyses;
DROP TABLE IF EXISTS module_snapshots;
DROP TABLE IF EXISTS ticker_data_modules;
DROP TABLE IF EXISTS analysis_catalog;
