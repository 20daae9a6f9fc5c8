-- Mirror of the control.flags topic (silver's backlog control, seed 000: docs/pipelines/silver.md).

-- +goose Up
CREATE TABLE control_flags (
    name       TEXT PRIMARY KEY,
    value      BOOLEAN     NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE IF EXISTS control_flags;
