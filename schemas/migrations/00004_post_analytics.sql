-- Results of the smap analytics stage (seed 001, docs/pipelines/smap.md), one row per
-- analysed item, upserted by (project_id, item_id) so that a redelivered
-- item changes nothing. error_type/error_msg are set for items whose
-- analysis failed (they also went to smap.analytics.errors).

-- +goose Up
CREATE TABLE post_analytics (
    project_id       TEXT        NOT NULL,
    item_id          TEXT        NOT NULL,
    platform         TEXT,
    language         TEXT        NOT NULL DEFAULT 'unknown',
    sentiment_label  TEXT,
    sentiment_score  DOUBLE PRECISION,
    keywords         JSONB       NOT NULL DEFAULT '[]'::jsonb,
    mentions         JSONB       NOT NULL DEFAULT '[]'::jsonb,
    engagement_score DOUBLE PRECISION,
    raw_object_key   TEXT,
    analyzed_at      TIMESTAMPTZ,
    error_type       TEXT,
    error_msg        TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, item_id)
);

CREATE INDEX idx_post_analytics_project_sentiment ON post_analytics (project_id, sentiment_label);
CREATE INDEX idx_post_analytics_analyzed_at ON post_analytics (analyzed_at);

-- +goose Down
DROP TABLE IF EXISTS post_analytics;
