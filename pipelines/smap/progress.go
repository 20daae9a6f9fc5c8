package smap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/stages/progress"
)

// Progress is the progress of a project as the API reports it (the seed's
// get_project_progress): processed counts failed items too; percent is
// processed/total in percent with two decimals (0 while the total is 0).
type Progress struct {
	ProjectID string  `json:"project_id"`
	Status    string  `json:"status"`
	Total     int64   `json:"total"`
	Processed int64   `json:"processed"`
	Errors    int64   `json:"errors"`
	Percent   float64 `json:"percent"`
}

// ProgressOf converts a tracker state.
func ProgressOf(s progress.State) Progress {
	return Progress{ProjectID: s.ID, Status: s.Status, Total: s.Total, Processed: s.Done, Errors: s.Errors, Percent: s.Percent()}
}

// ProgressHandler serves ProgressRoute: 200 with the Progress JSON, 404
// with status NOT_FOUND for a project without state, 503 when Redis
// cannot be read.
func ProgressHandler(tr *progress.Tracker, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		w.Header().Set("Content-Type", "application/json")
		if id == "" {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "project id is required"})
			return
		}
		st, err := tr.Get(r.Context(), id)
		if err != nil {
			log.Warn("progress query failed", "project_id", id, "err", err)
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "progress state unavailable"})
			return
		}
		if st.Status == progress.StatusNotFound {
			w.WriteHeader(http.StatusNotFound)
		}
		_ = json.NewEncoder(w).Encode(ProgressOf(st))
	})
}

// RebuildProgress restores the Redis progress state of a project from the
// systems of record, replacing whatever Redis holds for it: the processed
// items and their errors from post_analytics, the sealed total and the
// completion from the project's meta object (projects/{id}.json, written
// by the collector). If the rebuilt project is complete and its completion
// was never published, it publishes smap.job.completed (with the
// project's deterministic event id) and marks it done. Items counted while
// the rebuild runs are not lost: post_analytics holds every item before
// its analysis.finished event exists, and counting is idempotent per item.
func RebuildProgress(ctx context.Context, env pipelines.Env, cfg Config, projectID string) (progress.State, error) {
	cfg = cfg.withDefaults()
	if env.DB == nil || env.Redis == nil || env.Objects == nil {
		return progress.State{}, errors.New("smap rebuild-progress needs PostgreSQL, Redis and the object store")
	}
	items, err := analysedItems(ctx, env.DB, projectID)
	if err != nil {
		return progress.State{}, err
	}
	meta, err := readMeta(ctx, env.Objects, projectID)
	if err != nil {
		return progress.State{}, err
	}
	rdb, closeRedis := StateClient(env.Redis, cfg)
	defer closeRedis()
	tr, err := NewTracker(rdb, cfg)
	if err != nil {
		return progress.State{}, err
	}
	d, err := tr.Rebuild(ctx, projectID, progress.Snapshot{
		Items: items, Total: meta.Total, Sealed: !meta.SealedAt.IsZero(), CompletedAt: meta.CompletedAt,
	})
	if err != nil {
		return progress.State{}, err
	}
	if !d.Publish {
		return d.State, nil
	}
	cl, err := kgo.NewClient(env.Kafka...)
	if err != nil {
		return d.State, fmt.Errorf("smap rebuild-progress: kafka producer: %w", err)
	}
	defer cl.Close()
	m, err := newMetrics(nil) // a one-shot command: metrics are not exported
	if err != nil {
		return d.State, err
	}
	log := env.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := newCompleter(cfg, tr, cl, env.Objects, m, log).complete(ctx, d); err != nil {
		return d.State, err
	}
	return tr.Get(ctx, projectID)
}
