-- Archive of DLQ records for SQL inspection and re-drive (docs/dead-letters.md).
-- One row per DLQ record, identified by its DLQ coordinates so that
-- archiving is idempotent. The dlq.* headers become columns; payload keeps
-- the original value bytes, payload_json the value when it is valid JSON.

-- +goose Up
CREATE TABLE dlq_archive (
    id               BIGSERIAL PRIMARY KEY,
    dlq_topic        TEXT        NOT NULL,
    dlq_partition    INT         NOT NULL,
    dlq_offset       BIGINT      NOT NULL,
    source_topic     TEXT,
    source_partition INT,
    source_offset    BIGINT,
    reason           TEXT        NOT NULL,
    rule_id          TEXT        NOT NULL DEFAULT '',
    error_msg        TEXT        NOT NULL DEFAULT '',
    stage            TEXT        NOT NULL DEFAULT '',
    attempts         INT         NOT NULL DEFAULT 0,
    record_key       TEXT,
    payload          BYTEA       NOT NULL,
    payload_json     JSONB,
    failed_at        TIMESTAMPTZ,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (dlq_topic, dlq_partition, dlq_offset)
);

CREATE INDEX idx_dlq_archive_reason_rule ON dlq_archive (reason, rule_id);
CREATE INDEX idx_dlq_archive_created_at ON dlq_archive (created_at);

-- +goose Down
DROP TABLE IF EXISTS dlq_archive;
