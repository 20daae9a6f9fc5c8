package smap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/stages/progress"
)

// DemoOptions configures DemoScenario. Zero fields take the defaults
// documented on them.
type DemoOptions struct {
	// ProjectID (default "demo-" + the current Unix time in ms).
	ProjectID string
	// Items is the number of synthetic items, spread over three platforms
	// (default 300).
	Items int
	// Keywords of the project (default VinFast, VF3).
	Keywords []string
	// Poll is the progress polling period (default 200ms).
	Poll time.Duration
	// Report, when set, is called with the progress after every poll (for
	// a progress bar) and once more at the end.
	Report func(Progress)
}

// DemoScenario publishes a smap.project.created event for a project of
// synthetic items and waits until the project is DONE (or ctx ends),
// reporting its progress. The smap services (Services) must be running
// against the same Kafka, Redis and object store, with a crawler that
// routes synthetic:// targets to a SyntheticCrawler (the default).
func DemoScenario(ctx context.Context, env pipelines.Env, cfg Config, o DemoOptions) (Progress, error) {
	cfg = cfg.withDefaults()
	if env.Redis == nil {
		return Progress{}, errors.New("smap demo needs Redis")
	}
	if o.ProjectID == "" {
		o.ProjectID = fmt.Sprintf("demo-%d", time.Now().UnixMilli())
	}
	if o.Items <= 0 {
		o.Items = 300
	}
	if o.Keywords == nil {
		o.Keywords = []string{"VinFast", "VF3"}
	}
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	platforms := []string{"tiktok", "facebook", "youtube"}
	var targets []Target
	for i, p := range platforms {
		n := o.Items / len(platforms)
		if i < o.Items%len(platforms) {
			n++
		}
		targets = append(targets, Target{Platform: p, URL: fmt.Sprintf("synthetic://%s?items=%d", p, n)})
	}
	ev := NewProjectCreated(ProjectCreated{
		ProjectID: o.ProjectID, Keywords: o.Keywords, Targets: targets,
		DateRange: []string{"2025-01-01", "2025-02-01"},
	}, cfg.Now())
	b, err := json.Marshal(ev)
	if err != nil {
		return Progress{}, fmt.Errorf("smap demo: encode project.created: %w", err)
	}
	rdb, closeRedis := StateClient(env.Redis, cfg)
	defer closeRedis()
	tr, err := NewTracker(rdb, cfg)
	if err != nil {
		return Progress{}, err
	}
	cl, err := kgo.NewClient(env.Kafka...)
	if err != nil {
		return Progress{}, fmt.Errorf("smap demo: kafka producer: %w", err)
	}
	defer cl.Close()
	rec := &kgo.Record{Topic: cfg.ProjectCreatedTopic, Key: []byte(o.ProjectID), Value: b}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return Progress{}, fmt.Errorf("smap demo: produce project.created: %w", err)
	}
	return WatchProgress(ctx, tr, o.ProjectID, o.Poll, o.Report)
}

// WatchProgress polls the project's progress every poll until it is DONE
// or ctx ends, calling report (when set) after every poll.
func WatchProgress(ctx context.Context, tr *progress.Tracker, projectID string, poll time.Duration, report func(Progress)) (Progress, error) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		st, err := tr.Get(ctx, projectID)
		if err != nil && ctx.Err() == nil {
			return Progress{}, err
		}
		p := ProgressOf(st)
		if err == nil && report != nil {
			report(p)
		}
		if st.Status == progress.StatusDone {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("project %s not done (%s %d/%d): %w", projectID, p.Status, p.Processed, p.Total, ctx.Err())
		case <-t.C:
		}
	}
}
