package smap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/sinks/objstore"
)

// row is one post_analytics row.
type row struct {
	ProjectID, ItemID, Platform string
	Language, SentimentLabel    string
	SentimentScore              float64
	Keywords                    []string
	Mentions                    []Mention
	EngagementScore             float64
	ObjectKey                   string
	AnalyzedAt                  time.Time
	ErrorType, ErrorMsg         string // empty for a successful analysis
}

// upsertSQL writes one item's result. A redelivered item rewrites the same
// values; an error never replaces a successful analysis of the same item
// (e.g. a replay after the raw object was deleted).
const upsertSQL = `
INSERT INTO post_analytics (project_id, item_id, platform, language, sentiment_label, sentiment_score,
    keywords, mentions, engagement_score, raw_object_key, analyzed_at, error_type, error_msg)
VALUES ($1, $2, NULLIF($3, ''), COALESCE(NULLIF($4, ''), 'unknown'), NULLIF($5, ''), $6,
    $7, $8, $9, NULLIF($10, ''), $11, NULLIF($12, ''), NULLIF($13, ''))
ON CONFLICT (project_id, item_id) DO UPDATE SET
    platform = EXCLUDED.platform, language = EXCLUDED.language,
    sentiment_label = EXCLUDED.sentiment_label, sentiment_score = EXCLUDED.sentiment_score,
    keywords = EXCLUDED.keywords, mentions = EXCLUDED.mentions,
    engagement_score = EXCLUDED.engagement_score, raw_object_key = EXCLUDED.raw_object_key,
    analyzed_at = EXCLUDED.analyzed_at, error_type = EXCLUDED.error_type, error_msg = EXCLUDED.error_msg,
    updated_at = now()
WHERE post_analytics.error_type IS NOT NULL OR EXCLUDED.error_type IS NULL`

// upsertRows writes rows in one transaction (one statement per row, so
// that two rows of one key in a batch are applied in order).
func upsertRows(ctx context.Context, db *pgxpool.Pool, rows []row) error {
	if len(rows) == 0 {
		return nil
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, r := range rows {
			kw := make([]string, len(r.Keywords))
			for i, k := range r.Keywords {
				kw[i] = pgText(k)
			}
			ms := make([]Mention, len(r.Mentions))
			for i, m := range r.Mentions {
				ms[i] = Mention{Keyword: pgText(m.Keyword), Count: m.Count}
			}
			kwJSON, _ := json.Marshal(kw)
			msJSON, _ := json.Marshal(ms)
			var sScore, eScore *float64
			if r.ErrorType == "" {
				sScore, eScore = &r.SentimentScore, &r.EngagementScore
			}
			b.Queue(upsertSQL, pgText(r.ProjectID), pgText(r.ItemID), pgText(r.Platform), pgText(r.Language), pgText(r.SentimentLabel), sScore,
				string(kwJSON), string(msJSON), eScore, pgText(r.ObjectKey), r.AnalyzedAt, pgText(r.ErrorType), pgText(r.ErrorMsg))
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("upsert %d post_analytics rows: %w", len(rows), err)
		}
		return nil
	})
}

// pgText removes NUL characters and replaces invalid UTF-8 with U+FFFD:
// PostgreSQL refuses both in text and jsonb values ("invalid byte
// sequence for encoding UTF8"), so one such character in a keyword or an
// error message (an analyser's message may cut a character in half) would
// make every write of the batch fail, and the analytics partition retry
// it forever.
func pgText(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
}

// analysedItems returns every item of project in post_analytics and
// whether it failed.
func analysedItems(ctx context.Context, db *pgxpool.Pool, projectID string) (map[string]bool, error) {
	rows, err := db.Query(ctx, `SELECT item_id, error_type IS NOT NULL FROM post_analytics WHERE project_id = $1`, projectID)
	if err != nil {
		return nil, fmt.Errorf("read post_analytics of %s: %w", projectID, err)
	}
	out := map[string]bool{}
	var id string
	var failed bool
	_, err = pgx.ForEachRow(rows, []any{&id, &failed}, func() error {
		out[id] = failed
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read post_analytics of %s: %w", projectID, err)
	}
	return out, nil
}

// projectMeta is what the collector records about a project in the object
// store (projects/{id}.json), next to its raw items: the durable record of
// the sealed total and of the completion, used to rebuild lost progress.
type projectMeta struct {
	ProjectID string    `json:"project_id"`
	Keywords  []string  `json:"keywords,omitempty"`
	Total     int64     `json:"total"`
	SealedAt  time.Time `json:"sealed_at,omitzero"`
	// SealedBy is the project.created record whose crawl sealed the total
	// (topic/partition/offset): its redelivery announces the items again,
	// another record's (a duplicate) does not.
	SealedBy    string    `json:"sealed_by,omitempty"`
	CompletedAt time.Time `json:"completed_at,omitzero"`
}

func metaKey(projectID string) string {
	return "projects/" + url.PathEscape(projectID) + ".json"
}

// readMeta returns the project's meta, or a zero meta when there is none.
func readMeta(ctx context.Context, st objstore.Store, projectID string) (projectMeta, error) {
	return readJSON(ctx, st, metaKey(projectID), "project meta "+projectID, projectMeta{ProjectID: projectID})
}

// readJSON decodes the JSON object at key into a T, or returns missing
// when there is none; what names the object in errors.
func readJSON[T any](ctx context.Context, st objstore.Store, key, what string, missing T) (T, error) {
	var v T
	b, err := st.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return missing, nil
	}
	if err != nil {
		return v, fmt.Errorf("read %s: %w", what, err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("decode %s: %w", what, err)
	}
	return v, nil
}

// updateMeta reads, changes and writes the project's meta. Writers of one
// project are sequential (the collector's partition worker, then the
// completion), so read-modify-write is safe in normal operation; a member
// that lost the partition and has not noticed yet can still race them.
func updateMeta(ctx context.Context, st objstore.Store, projectID string, change func(*projectMeta)) error {
	m, err := readMeta(ctx, st, projectID)
	if err != nil {
		return err
	}
	change(&m)
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode project meta %s: %w", projectID, err)
	}
	if err := st.Put(ctx, metaKey(projectID), b, "application/json"); err != nil {
		return fmt.Errorf("write project meta %s: %w", projectID, err)
	}
	return nil
}
