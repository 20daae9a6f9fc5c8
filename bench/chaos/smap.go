package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/bench/internal/faults"
	"github.com/sluicehq/sluice/pipelines/smap"
	"github.com/sluicehq/sluice/stages/progress"
	"github.com/sluicehq/sluice/topics"
)

// smapLoad is smap's part of a scenario: projects of synthetic items (each
// project three targets, one per platform), all created at once, so that
// the collector crawls and stores objects while analytics and the progress
// counter work on the first items. What the input implies: per project,
// the synthetic crawler's deterministic items (smap.ItemID of
// "<platform>-%05d" source ids), each with one raw object, one
// post_analytics row without error, one analysis.finished event (exactly
// one for a read_committed reader: the analytics runtime produces them in
// its commit transactions) and one count in the project's Redis counter
// (total = done, errors 0, DONE), one job.completed event per project, and
// no dead letter.
type smapLoad struct {
	projects, perTarget int
	ids                 []string
	tracker             *progress.Tracker
	state               *redis.Client // smap's state database
	closeState          func() error
}

var smapPlatforms = [...]string{"tiktok", "facebook", "youtube"}

func newSmapLoad(cfg *config) *smapLoad {
	return &smapLoad{projects: max(1, int(30*cfg.scale)), perTarget: 100}
}

func (l *smapLoad) pipeline() string { return "smap" }
func (l *smapLoad) sent() int        { return l.projects }
func (l *smapLoad) unit() string     { return "items" }
func (l *smapLoad) itemsPer() int64  { return int64(len(smapPlatforms) * l.perTarget) }

func (l *smapLoad) groups() map[string][]string {
	return map[string][]string{
		smap.CollectorName: {topics.SmapProjectCreated},
		smap.AnalyticsName: {topics.SmapDataCollected},
		smap.ProgressName:  {topics.SmapAnalysisFinished},
	}
}

// expected returns the raw object key of every item the input implies, by
// item id, and the project of each item.
func (l *smapLoad) expected() (objects, project map[string]string) {
	objects, project = map[string]string{}, map[string]string{}
	for _, p := range l.ids {
		for _, pl := range smapPlatforms {
			for i := range l.perTarget {
				id := smap.ItemID(p, pl, fmt.Sprintf("%s-%05d", pl, i))
				objects[id], project[id] = smap.ObjectKey(pl, id), p
			}
		}
	}
	return objects, project
}

func (l *smapLoad) setup(ctx context.Context, sc *scene) error {
	rdb, closeState := smap.StateClient(sc.redis, smap.Config{})
	tr, err := smap.NewTracker(rdb, smap.Config{})
	if err != nil {
		_ = closeState()
		return err
	}
	l.tracker, l.state, l.closeState = tr, rdb, closeState
	var recs []*kgo.Record
	for i := range l.projects {
		id := fmt.Sprintf("%s-p%03d", strings.TrimSuffix(sc.prefix, "."), i)
		l.ids = append(l.ids, id)
		var targets []smap.Target
		for _, pl := range smapPlatforms {
			targets = append(targets, smap.Target{Platform: pl, URL: fmt.Sprintf("synthetic://%s?items=%d", pl, l.perTarget)})
		}
		b, err := json.Marshal(smap.NewProjectCreated(smap.ProjectCreated{ProjectID: id, Keywords: []string{"VinFast", "VF3"},
			Targets: targets, DateRange: []string{"2025-01-01", "2025-02-01"}}, time.Now()))
		if err != nil {
			return err
		}
		recs = append(recs, &kgo.Record{Topic: sc.topic(topics.SmapProjectCreated), Key: []byte(id), Value: b})
	}
	return sc.cl.ProduceSync(ctx, recs...).FirstErr()
}

// progress counts the items the progress counter has counted (each at
// most the project's size) plus one per project DONE.
func (l *smapLoad) progress(ctx context.Context, sc *scene) (done, want int64, err error) {
	for _, p := range l.ids {
		st, err := l.tracker.Get(ctx, p)
		if errors.Is(err, progress.ErrMissing) {
			continue // not started yet
		}
		if err != nil {
			return 0, 0, err
		}
		done += min(st.Done, l.itemsPer())
		if st.Status == progress.StatusDone {
			done++
		}
	}
	return done, int64(len(l.ids)) * (l.itemsPer() + 1), nil
}

func (l *smapLoad) verify(ctx context.Context, sc *scene, r *result) error {
	defer func() { _ = l.closeState() }()
	objects, project := l.expected()
	nItems := int64(len(objects))

	// Counters: per project total = done = its items, errors 0, DONE; the
	// set of counted items equals the items.
	counted := effect{kind: "counted items", want: nItems}
	for _, p := range l.ids {
		st, err := l.tracker.Get(ctx, p)
		if err != nil && !errors.Is(err, progress.ErrMissing) {
			return fmt.Errorf("counter of %s: %w", p, err)
		}
		counted.got += st.Done
		members, err := l.state.SMembers(ctx, l.tracker.Key(p)+":items").Result()
		if err != nil {
			return fmt.Errorf("counted set of %s: %w", p, err)
		}
		in := map[string]bool{}
		for _, m := range members {
			if project[m] != p {
				counted.dup++ // counted, yet not an item of the project
			}
			in[m] = true
		}
		for id, ip := range project {
			if ip == p && !in[id] {
				counted.lost++
			}
		}
		// done counts each member once: more means an item counted twice.
		counted.dup += max(0, st.Done-int64(len(members)))
		counted.lost += max(0, int64(len(members))-st.Done)
		if st.Total != l.itemsPer() || st.Errors != 0 || st.Status != progress.StatusDone {
			r.note("project %s: counter total %d (want %d), errors %d, status %s", p, st.Total, l.itemsPer(), st.Errors, st.Status)
			counted.lost += max(0, l.itemsPer()-st.Total) + st.Errors
		}
	}
	r.add(counted)

	// post_analytics: one row without error per item.
	rows := effect{kind: "post_analytics rows", want: nItems}
	q, err := sc.db.Query(ctx, `SELECT project_id, item_id, error_type FROM post_analytics`)
	if err != nil {
		return fmt.Errorf("post_analytics: %w", err)
	}
	seen := map[string]bool{}
	for q.Next() {
		var p, id string
		var errType *string
		if err := q.Scan(&p, &id, &errType); err != nil {
			q.Close()
			return err
		}
		rows.got++
		switch {
		case project[id] != p:
			rows.dup++
		case errType != nil:
			rows.lost++
			r.note("post_analytics %s/%s has error_type %s", p, id, *errType)
		}
		seen[id] = true
	}
	q.Close()
	if err := q.Err(); err != nil {
		return fmt.Errorf("post_analytics: %w", err)
	}
	for id := range project {
		if !seen[id] {
			rows.lost++
		}
	}
	r.add(rows)

	// Raw objects: one per item, nothing else under raw/.
	objs := effect{kind: "raw objects", want: nItems}
	infos, err := sc.objects.List(ctx, "raw/")
	if err != nil {
		return fmt.Errorf("list raw objects: %w", err)
	}
	keys := map[string]bool{}
	for _, in := range infos {
		objs.got++
		keys[in.Key] = true
	}
	want := map[string]bool{}
	for _, k := range objects {
		want[k] = true
		if !keys[k] {
			objs.lost++
		}
	}
	for k := range keys {
		if !want[k] {
			objs.dup++
		}
	}
	r.add(objs)

	// job.completed: one per project, with the project's counts.
	completed := effect{kind: "job.completed events", want: int64(len(l.ids))}
	per := map[string]int{}
	if err := faults.ReadCommitted(ctx, sc.adm, sc.kopts, sc.topic(topics.SmapJobCompleted), func(rec *kgo.Record) {
		completed.got++
		e, err := smap.DecodeJobCompleted(rec.Value)
		if err != nil {
			r.note("undecodable job.completed: %v", err)
			return
		}
		per[e.Payload.ProjectID]++
		if e.Payload.Total != l.itemsPer() || e.Payload.Done != l.itemsPer() || e.Payload.Errors != 0 {
			r.note("job.completed of %s: total %d, done %d, errors %d (want %d, %d, 0)", e.Payload.ProjectID,
				e.Payload.Total, e.Payload.Done, e.Payload.Errors, l.itemsPer(), l.itemsPer())
		}
	}); err != nil {
		return err
	}
	for _, p := range l.ids {
		if per[p] == 0 {
			completed.lost++
		}
		completed.dup += int64(max(0, per[p]-1))
	}
	r.add(completed)

	// Dead letters: none.
	dl := effect{kind: "dead letters", want: 0}
	records, distinct, err := faults.DLQCoordinates(ctx, sc.adm, sc.kopts, sc.topic(topics.SmapAnalyticsErrors))
	if err != nil {
		return err
	}
	dl.got, dl.dup = int64(records), int64(records-distinct)
	r.add(dl)

	// analysis.finished: for a read_committed reader exactly one event per
	// data.collected record (the analytics runtime produces them in the
	// transactions that commit its offsets), every item's at least once,
	// none of an item outside the load. The collector announces items at
	// least once (a project crawled again after a kill or a failed produce
	// announces its items again): those copies are reported, not counted.
	cper := map[string]int64{}
	if err := faults.ReadCommitted(ctx, sc.adm, sc.kopts, sc.topic(topics.SmapDataCollected), func(rec *kgo.Record) {
		cper[string(rec.Key)]++
	}); err != nil {
		return err
	}
	finished := effect{kind: "analysis.finished events (one per data.collected record)", want: nItems}
	fper := map[string]int64{}
	if err := faults.ReadCommitted(ctx, sc.adm, sc.kopts, sc.topic(topics.SmapAnalysisFinished), func(rec *kgo.Record) {
		finished.got++
		e, err := smap.DecodeAnalysisFinished(rec.Value)
		if err != nil {
			r.note("undecodable analysis.finished: %v", err)
			finished.dup++
			return
		}
		if project[e.Payload.ItemID] != e.Payload.ProjectID {
			finished.dup++ // announced, yet not an item of the load
			return
		}
		fper[e.Payload.ItemID]++
	}); err != nil {
		return err
	}
	var recollected int64
	for id := range project {
		if fper[id] == 0 {
			finished.lost++
		}
		finished.want += max(0, cper[id]-1)
		finished.dup += max(0, fper[id]-max(cper[id], 1))
		recollected += max(0, cper[id]-1)
	}
	r.add(finished)
	if recollected > 0 {
		r.note("data.collected announced %d items more than once (the collector's re-crawl is at least once; their analysis.finished copies are expected, not counted as duplicated)", recollected)
	}
	return nil
}
