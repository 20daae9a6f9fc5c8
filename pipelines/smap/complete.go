package smap

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages/progress"
)

// completer publishes smap.job.completed for decided completions and marks
// them done (see progress.Sink). It is shared by the progress counter (the
// usual path), the collector (a completion decided by the seal) and
// rebuild-progress. Safe for concurrent use.
type completer struct {
	cfg     Config
	cl      *kgo.Client
	objects objstore.Store
	m       *metrics
	log     *slog.Logger
	sink    *progress.Sink
}

func newCompleter(cfg Config, tr *progress.Tracker, cl *kgo.Client, objects objstore.Store, m *metrics, log *slog.Logger) *completer {
	c := &completer{cfg: cfg, cl: cl, objects: objects, m: m, log: log}
	c.sink = progress.NewSink(tr, c.publish, progress.WithAfterDone(c.afterDone))
	return c
}

// completedRecord is the job.completed record of a completion; its event
// id is derived from the project id, so a re-published completion carries
// the same id.
func completedRecord(cfg Config, c progress.Completion) (*kgo.Record, error) {
	ev := Event[JobCompleted]{
		EventID:   completedEventID(c.ID),
		Timestamp: cfg.Now().UTC(),
		Payload: JobCompleted{
			ProjectID: c.ID, Total: c.Total, Done: c.Done, Errors: c.Errors,
			CompletedAt: cfg.Now().UTC(),
		},
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encode job.completed %s: %w", c.ID, err)
	}
	return &kgo.Record{Topic: cfg.JobCompletedTopic, Key: []byte(c.ID), Value: b}, nil
}

func (c *completer) publish(ctx context.Context, cs []progress.Completion) error {
	if c.cfg.beforePublish != nil {
		if err := c.cfg.beforePublish(ctx, cs); err != nil {
			return err
		}
	}
	recs := make([]*kgo.Record, 0, len(cs))
	for _, cp := range cs {
		r, err := completedRecord(c.cfg, cp)
		if err != nil {
			return err
		}
		recs = append(recs, r)
	}
	if err := c.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce %d job.completed: %w", len(recs), err)
	}
	for _, cp := range cs {
		c.m.completions.WithLabelValues(strconv.FormatBool(cp.Repeat)).Inc()
		c.log.Info("project completed", "project_id", cp.ID, "total", cp.Total, "done", cp.Done, "errors", cp.Errors, "repeat", cp.Repeat)
	}
	return nil
}

// afterDone records the completion time in the project's meta object, so
// that a rebuild after a Redis loss, or a replay of project.created after
// the progress state expired, knows the completion was published. A failed
// write fails the batch: the runtime retries it, and the retry only writes
// the meta objects again (progress.WithAfterDone); the write is
// idempotent (an existing completed_at is kept).
func (c *completer) afterDone(ctx context.Context, cs []progress.Completion) error {
	for _, cp := range cs {
		at := cp.CompletedAt
		if at.IsZero() {
			at = c.cfg.Now().UTC()
		}
		err := updateMeta(ctx, c.objects, cp.ID, func(m *projectMeta) {
			if m.CompletedAt.IsZero() {
				m.CompletedAt = at
			}
		})
		if err != nil {
			op := "record the completion of project " + cp.ID
			if fatal := storeConfigError(op, err); fatal != nil {
				return fatal
			}
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	return nil
}

// complete publishes one decided completion and marks it done.
func (c *completer) complete(ctx context.Context, d progress.Decision) error {
	return c.sink.Write(ctx, []progress.Completion{{State: d.State, Repeat: d.Repeat}})
}
