-- Mirror of the control.flags topic (DESIGN §5.1 backlog control, seed 000).

-- +goose Up
CREATE TABLE control_flags (
    name       TEXT PRIMARY KEY,
    value      BOOLEAN     NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE IF EXISTS control_flags;
