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
// processed/total in percent with two decimals, at most 100 (0 while the
// total is 0), never rounded up to 100 while items remain (99.99 at most),
// and 100 once the project is DONE, so that a project without items
// (total 0) ends at 100 %.
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
	pct := s.Percent()
	switch {
	case s.Status == progress.StatusDone:
		pct = 100
	case s.Done < s.Total:
		pct = min(pct, 99.99)
	}
	return Progress{ProjectID: s.ID, Status: s.Status, Total: s.Total, Processed: s.Done, Errors: s.Errors, Percent: pct}
}

// ProgressHandler serves ProgressRoute: 200 with the Progress JSON, 404
// with status NOT_FOUND for a project without state or an id no project
// can have (progress.ErrInvalidID), 503 when Redis cannot be read.
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
		if errors.Is(err, progress.ErrInvalidID) {
			st, err = progress.State{ID: id, Status: progress.StatusNotFound}, nil
		}
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
// project's deterministic event id) and marks it done.
//
// The pipeline may go on working during the rebuild (a live project, or
// the collector recreating lost state). What it did between the reads of
// the systems of record and the replacement of the state is not lost:
// those are read again afterwards, items analysed meanwhile are counted
// (post_analytics holds every item before its analysis.finished event
// exists, and counting is idempotent per item), a seal made meanwhile is
// applied again, and a completion published meanwhile is marked done
// rather than published twice.
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
	if cfg.afterSnapshot != nil {
		cfg.afterSnapshot(ctx)
	}
	d, err := tr.Rebuild(ctx, projectID, progress.Snapshot{
		Items: items, Total: meta.Total, Sealed: !meta.SealedAt.IsZero(), CompletedAt: meta.CompletedAt,
	})
	if err != nil {
		return progress.State{}, err
	}
	d, completed, err := reconcileRebuild(ctx, env, tr, projectID, items, meta, d)
	if err != nil {
		return d.State, err
	}
	if completed {
		return tr.MarkDone(ctx, projectID)
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

// reconcileRebuild applies to the rebuilt state of projectID what the
// pipeline did after the rebuild's snapshot (items, meta) was read and
// before the state was replaced, which the replacement erased: it reads
// post_analytics and the meta object again, counts the items analysed
// meanwhile, seals the total if the collector sealed it meanwhile, and
// reports completed when the completion was published meanwhile (the
// caller then marks it done instead of publishing it again). The returned
// decision asks to publish when any step decided the completion.
func reconcileRebuild(ctx context.Context, env pipelines.Env, tr *progress.Tracker, projectID string,
	items map[string]bool, meta projectMeta, d progress.Decision) (progress.Decision, bool, error) {
	after, err := analysedItems(ctx, env.DB, projectID)
	if err != nil {
		return d, false, err
	}
	metaAfter, err := readMeta(ctx, env.Objects, projectID)
	if err != nil {
		return d, false, err
	}
	publish, repeat := d.Publish, d.Repeat
	merge := func(nd progress.Decision) {
		d = nd
		if nd.Publish {
			publish, repeat = true, repeat || nd.Repeat
		}
	}
	if meta.SealedAt.IsZero() && !metaAfter.SealedAt.IsZero() {
		nd, err := tr.Seal(ctx, projectID, metaAfter.Total)
		if err != nil {
			return d, false, err
		}
		merge(nd)
	}
	for item, failed := range after {
		if _, ok := items[item]; ok {
			continue
		}
		nd, err := tr.Count(ctx, projectID, item, failed)
		if err != nil {
			return d, false, err
		}
		merge(nd)
	}
	if meta.CompletedAt.IsZero() && !metaAfter.CompletedAt.IsZero() {
		return d, true, nil
	}
	d.Publish, d.Repeat = publish, repeat
	return d, false, nil
}
