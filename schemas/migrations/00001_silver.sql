-- Silver tables of the silver pipeline (seed 000, docs/pipelines/silver.md). Columns,
-- types, keys and indexes follow the seed's DDL.

-- +goose Up
CREATE TABLE ta_silver (
    symbol           TEXT             NOT NULL,
    trade_date       DATE             NOT NULL,
    open             DOUBLE PRECISION NOT NULL,
    high             DOUBLE PRECISION NOT NULL,
    low              DOUBLE PRECISION NOT NULL,
    close            DOUBLE PRECISION NOT NULL,
    volume           BIGINT           NOT NULL,
    vwap             DOUBLE PRECISION,
    adj_close        DOUBLE PRECISION,
    currency         TEXT             NOT NULL DEFAULT 'VND',
    price_multiplier DOUBLE PRECISION NOT NULL DEFAULT 1.0,
    source           TEXT,
    first_seen_time  TIMESTAMPTZ,
    ingest_time      TIMESTAMPTZ      NOT NULL DEFAULT now(),
    content_hash     TEXT,
    PRIMARY KEY (symbol, trade_date)
);

CREATE TABLE sa_silver (
    url_canonical           TEXT        UNIQUE NOT NULL,
    source_domain           TEXT        NOT NULL,
    publisher_time          TIMESTAMPTZ NOT NULL,
    first_seen_time         TIMESTAMPTZ NOT NULL,
    language                TEXT,
    title                   TEXT,
    text_normalized         TEXT,
    content_hash            TEXT        NOT NULL,
    symbols                 TEXT[],
    author                  TEXT,
    topic_tags              TEXT[],
    hype_raw                DOUBLE PRECISION,
    hype_crowd              DOUBLE PRECISION,
    hype_elitist            DOUBLE PRECISION,
    account_weights_applied BOOLEAN,
    ingest_time             TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (url_canonical)
);

CREATE INDEX idx_sa_silver_pub ON sa_silver (publisher_time);
CREATE INDEX idx_sa_silver_symbols ON sa_silver USING GIN (symbols);
CREATE INDEX idx_sa_silver_hash_fallback ON sa_silver (source_domain, content_hash);

-- +goose Down
DROP TABLE IF EXISTS sa_silver;
DROP TABLE IF EXISTS ta_silver;
