-- Tables of the trades pipeline (package pipelines/trades). The columns
-- are chosen from the fields the original system's repositories used (its
-- data model was not available). There is no outbox table: the Kafka
-- topics are the outbox.
--
-- broker_connections holds a user's broker tokens, sealed with AES-GCM
-- under BROKER_TOKEN_KEY (never stored or logged in clear). trades are
-- upserted by (user_id, broker, ext_id); their id is the UUIDv5 of
-- user_id|broker|ext_id. bias_tags hold one row per (trade, label); a
-- row's reflect_event_id names the coach.reflect sent for the trade's
-- label set, reflected_at is set once it was published. digests hold the
-- latest revision of a user's weekly digest (period_end exclusive).
-- market_bars cache OHLCV bars for the simulation.

-- +goose Up
CREATE TABLE broker_connections (
    user_id     TEXT NOT NULL,
    broker      TEXT NOT NULL CHECK (broker IN ('coinbase', 'binance')),
    access_enc  BYTEA NOT NULL,
    refresh_enc BYTEA,
    active      BOOLEAN NOT NULL DEFAULT true,
    PRIMARY KEY (user_id, broker)
);

CREATE TABLE trades (
    id         UUID PRIMARY KEY,
    user_id    TEXT NOT NULL,
    broker     TEXT NOT NULL,
    ext_id     TEXT NOT NULL,
    symbol     TEXT NOT NULL,
    side       TEXT NOT NULL CHECK (side IN ('BUY', 'SELL')),
    qty        NUMERIC NOT NULL CHECK (qty > 0),
    price      NUMERIC NOT NULL CHECK (price > 0),
    fee        NUMERIC NOT NULL DEFAULT 0 CHECK (fee >= 0),
    ts         TIMESTAMPTZ NOT NULL,
    import_id  TEXT,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (user_id, broker, ext_id)
);
CREATE INDEX idx_trades_user_ts ON trades (user_id, ts);

CREATE TABLE bias_tags (
    trade_id         UUID NOT NULL REFERENCES trades (id),
    label            TEXT NOT NULL,
    confidence       DOUBLE PRECISION NOT NULL CHECK (confidence BETWEEN 0 AND 1),
    features         JSONB NOT NULL,
    rules_version    INT NOT NULL,
    scored_at        TIMESTAMPTZ NOT NULL,
    reflect_event_id TEXT,
    reflected_at     TIMESTAMPTZ,
    PRIMARY KEY (trade_id, label)
);

CREATE TABLE digests (
    id           BIGSERIAL PRIMARY KEY,
    user_id      TEXT NOT NULL,
    period_start DATE NOT NULL,
    period_end   DATE NOT NULL,
    revision     INT NOT NULL,
    partial      BOOLEAN NOT NULL,
    agg          JSONB NOT NULL,
    object_key   TEXT NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (user_id, period_start)
);

CREATE TABLE market_bars (
    symbol      TEXT NOT NULL,
    granularity TEXT NOT NULL CHECK (granularity IN ('1h', '1d')),
    ts          TIMESTAMPTZ NOT NULL,
    open        NUMERIC,
    high        NUMERIC,
    low         NUMERIC,
    close       NUMERIC NOT NULL,
    volume      NUMERIC,
    PRIMARY KEY (symbol, granularity, ts)
);

-- +goose Down
DROP TABLE market_bars;
DROP TABLE digests;
DROP TABLE bias_tags;
DROP TABLE trades;
DROP TABLE broker_connections;
