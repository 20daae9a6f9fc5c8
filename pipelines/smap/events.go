package smap

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Event is the envelope of every smap event (seed 001): a unique event id,
// the time it was produced and the payload. Values are UTF-8 JSON matching
// the schemas smap.*.json of package schemas.
type Event[P any] struct {
	EventID   string    `json:"event_id"`
	Timestamp time.Time `json:"timestamp"`
	Payload   P         `json:"payload"`
}

// Target is one place to crawl. Platform names the source (tiktok,
// facebook, news …); URL is what the crawler fetches: http(s) URLs go to
// the HTTP crawler, synthetic://PLATFORM?items=N to the synthetic one.
type Target struct {
	Platform string `json:"platform"`
	URL      string `json:"url,omitempty"`
}

// ProjectCreated is the payload of smap.project.created (key project_id).
type ProjectCreated struct {
	ProjectID string   `json:"project_id"`
	Keywords  []string `json:"keywords,omitempty"`
	Targets   []Target `json:"targets,omitempty"`
	// DateRange is [from, to] as YYYY-MM-DD; the built-in crawlers ignore it.
	DateRange []string `json:"date_range,omitempty"`
}

// DataCollected is the payload of smap.data.collected (key item_id): one
// raw item is in the object store at ObjectKey (the seed's minio_path).
// Keywords repeats the project's keywords so that analytics needs no
// project lookup.
type DataCollected struct {
	ProjectID string    `json:"project_id"`
	ItemID    string    `json:"item_id"`
	Platform  string    `json:"platform"`
	ObjectKey string    `json:"object_key"`
	CrawledAt time.Time `json:"crawled_at"`
	Keywords  []string  `json:"keywords,omitempty"`
}

// Analysis statuses carried by AnalysisFinished.Status.
const (
	AnalysisOK    = "ok"
	AnalysisError = "error"
)

// AnalysisFinished is the payload of smap.analysis.finished (key item_id):
// the item's processing ended and its row is in post_analytics. Status is
// "ok", or "error" when the item failed (it then also went to
// smap.analytics.errors with the DLQ headers, and ErrorReason/Error say
// why); both count as done for the project's progress.
type AnalysisFinished struct {
	ProjectID       string    `json:"project_id"`
	ItemID          string    `json:"item_id"`
	Platform        string    `json:"platform,omitempty"`
	Status          string    `json:"status"`
	Language        string    `json:"language,omitempty"`
	SentimentLabel  string    `json:"sentiment_label,omitempty"`
	SentimentScore  float64   `json:"sentiment_score"`
	EngagementScore float64   `json:"engagement_score"`
	AnalyzedAt      time.Time `json:"analyzed_at"`
	ErrorReason     string    `json:"error_reason,omitempty"`
	Error           string    `json:"error,omitempty"`
}

// JobCompleted is the payload of smap.job.completed (key project_id),
// published once per project when every item is done, errors included.
type JobCompleted struct {
	ProjectID   string    `json:"project_id"`
	Total       int64     `json:"total"`
	Done        int64     `json:"done"`
	Errors      int64     `json:"errors"`
	CompletedAt time.Time `json:"completed_at"`
}

// Event ids. Events derived from an item or a project have deterministic
// ids so that consumers can drop a duplicate after an at-least-once
// redelivery: the same item always yields the same data.collected and
// analysis.finished ids, and a project the same job.completed id.
func collectedEventID(itemID string) string    { return "dc-" + itemID }
func finishedEventID(itemID string) string     { return "af-" + itemID }
func completedEventID(projectID string) string { return "jc-" + projectID }

// ItemID is the deterministic id of an item: the platform (lowercased) and
// the first 20 hex digits of SHA-256(project id, platform, source id). The
// same item found again in the same project (a redelivered project, a
// re-crawl) gets the same id, so it is counted and stored once; the same
// source item in two projects gets two ids, so projects never share rows
// or objects.
func ItemID(projectID, platform, sourceID string) string {
	h := sha256.New()
	for _, s := range []string{projectID, strings.ToLower(platform), sourceID} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return platformSlug(platform) + "-" + hex.EncodeToString(h.Sum(nil))[:20]
}

// ObjectKey is the object-store key of an item's raw JSON:
// raw/{platform}/{item}.json.
func ObjectKey(platform, itemID string) string {
	return "raw/" + platformSlug(platform) + "/" + itemID + ".json"
}

// platformSlug lowercases platform and keeps [a-z0-9_-] ("unknown" when
// nothing is left), so that it is safe in ids and object keys.
func platformSlug(platform string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(platform) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' || r == '-' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "unknown"
	}
	return b.String()
}

// decodeEvent parses an envelope and checks the fields every smap event
// needs.
func decodeEvent[P any](value []byte) (Event[P], error) {
	var e Event[P]
	if err := json.Unmarshal(value, &e); err != nil {
		return e, fmt.Errorf("smap event: %w", err)
	}
	return e, nil
}

// DecodeProjectCreated parses a smap.project.created value.
func DecodeProjectCreated(value []byte) (Event[ProjectCreated], error) {
	e, err := decodeEvent[ProjectCreated](value)
	if err == nil && e.Payload.ProjectID == "" {
		err = errors.New("smap.project.created: payload.project_id is missing")
	}
	return e, err
}

// DecodeDataCollected parses a smap.data.collected value.
func DecodeDataCollected(value []byte) (Event[DataCollected], error) {
	e, err := decodeEvent[DataCollected](value)
	if err == nil {
		p := e.Payload
		if p.ProjectID == "" || p.ItemID == "" || p.ObjectKey == "" {
			err = errors.New("smap.data.collected: payload needs project_id, item_id and object_key")
		}
	}
	return e, err
}

// DecodeAnalysisFinished parses a smap.analysis.finished value.
func DecodeAnalysisFinished(value []byte) (Event[AnalysisFinished], error) {
	e, err := decodeEvent[AnalysisFinished](value)
	if err == nil && (e.Payload.ProjectID == "" || e.Payload.ItemID == "") {
		err = errors.New("smap.analysis.finished: payload needs project_id and item_id")
	}
	return e, err
}

// DecodeJobCompleted parses a smap.job.completed value.
func DecodeJobCompleted(value []byte) (Event[JobCompleted], error) {
	e, err := decodeEvent[JobCompleted](value)
	if err == nil && e.Payload.ProjectID == "" {
		err = errors.New("smap.job.completed: payload.project_id is missing")
	}
	return e, err
}

// NewProjectCreated builds a project.created event with a random-free,
// project-derived event id ("pc-" + project id).
func NewProjectCreated(p ProjectCreated, now time.Time) Event[ProjectCreated] {
	return Event[ProjectCreated]{EventID: "pc-" + p.ProjectID, Timestamp: now.UTC(), Payload: p}
}
