package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
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
// "<platform>-%05d" source ids), each with one raw object (the item as the
// crawler yields it, under its item and project ids), one project meta
// object (total = the items, completed), one post_analytics row without
// error, one analysis.finished event per data.collected record (for a
// read_committed reader: the analytics runtime produces them in its commit
// transactions) and one count in the project's Redis counter (total =
// done, errors 0, DONE), one job.completed event per project, and no dead
// letter.
type smapLoad struct {
	projects, perTarget int
	ids                 []string
	created             map[string]smap.ProjectCreated // by project id
	tracker             *progress.Tracker
	state               *redis.Client // smap's state database
	closeState          func() error
}

var smapPlatforms = [...]string{"tiktok", "facebook", "youtube"}

func newSmapLoad(cfg *config) *smapLoad {
	return &smapLoad{projects: max(1, int(30*cfg.scale)), perTarget: 100, created: map[string]smap.ProjectCreated{}}
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
		pc := smap.ProjectCreated{ProjectID: id, Keywords: []string{"VinFast", "VF3"}, Targets: targets, DateRange: []string{"2025-01-01", "2025-02-01"}}
		l.created[id] = pc
		b, err := json.Marshal(smap.NewProjectCreated(pc, time.Now()))
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

	// Raw objects: one per item holding the crawler's item, nothing else
	// under raw/; one meta object per project, sealed at its items.
	wantRaw, err := l.rawChecks(ctx, objects, project)
	if err != nil {
		return err
	}
	objs, err := checkObjects(ctx, sc.objects, "raw/", "raw objects", wantRaw, r)
	if err != nil {
		return err
	}
	r.add(objs)
	wantMeta := map[string]objectCheck{}
	for _, p := range l.ids {
		wantMeta["projects/"+url.PathEscape(p)+".json"] = l.metaCheck(p)
		wantMeta["projects/"+url.PathEscape(p)+".items.json"] = journalCheck(p, project, int(l.itemsPer()))
	}
	metas, err := checkObjects(ctx, sc.objects, "projects/", "project meta and crawl journal objects", wantMeta, r)
	if err != nil {
		return err
	}
	r.add(metas)

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

	// data.collected: for a read_committed reader exactly one announcement
	// per item of the load (the collector's runtime produces them in the
	// transactions that commit project.created offsets), none of an item
	// outside it.
	collected := effect{kind: "data.collected events", want: nItems}
	cper := map[string]int64{}
	if err := faults.ReadCommitted(ctx, sc.adm, sc.kopts, sc.topic(topics.SmapDataCollected), func(rec *kgo.Record) {
		collected.got++
		e, err := smap.DecodeDataCollected(rec.Value)
		if err != nil || project[e.Payload.ItemID] != e.Payload.ProjectID || string(rec.Key) != e.Payload.ItemID {
			r.note("data.collected not of an item of the load: key %q (%v)", rec.Key, err)
			collected.dup++
			return
		}
		cper[e.Payload.ItemID]++
	}); err != nil {
		return err
	}
	// analysis.finished: for a read_committed reader exactly one event per
	// item (the analytics runtime produces them in the transactions that
	// commit its offsets), none of an item outside the load.
	finished := effect{kind: "analysis.finished events", want: nItems}
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
	for id := range project {
		if cper[id] == 0 {
			collected.lost++
		}
		collected.dup += max(0, cper[id]-1)
		if fper[id] == 0 {
			finished.lost++
		}
		finished.dup += max(0, fper[id]-1)
	}
	r.add(collected)
	r.add(finished)
	return nil
}

// rawChecks returns the check of every raw object the input implies, by
// key: the synthetic crawler's item (crawled again here) under its item
// and project ids, with a crawl time.
func (l *smapLoad) rawChecks(ctx context.Context, objects, project map[string]string) (map[string]objectCheck, error) {
	items := map[string]smap.Item{}
	var crawler smap.SyntheticCrawler
	for _, p := range l.ids {
		pc := l.created[p]
		for _, tg := range pc.Targets {
			if err := crawler.Crawl(ctx, pc, tg, func(it smap.Item) error {
				items[smap.ItemID(p, it.Platform, it.SourceID)] = it
				return nil
			}); err != nil {
				return nil, fmt.Errorf("crawl %s %s again: %w", p, tg.Platform, err)
			}
		}
	}
	out := map[string]objectCheck{}
	for id, key := range objects {
		it, ok := items[id]
		if !ok {
			return nil, fmt.Errorf("item %s: not crawled again", id)
		}
		wantItem := sameJSON(it)
		out[key] = func(body []byte) error {
			var raw smap.RawItem
			if err := json.Unmarshal(body, &raw); err != nil {
				return fmt.Errorf("not a raw item: %w", err)
			}
			if raw.ItemID != id || raw.ProjectID != project[id] || raw.CrawledAt.IsZero() {
				return fmt.Errorf("item %q of project %q crawled at %s, want item %s of project %s", raw.ItemID, raw.ProjectID, raw.CrawledAt, id, project[id])
			}
			b, err := json.Marshal(raw.Item)
			if err != nil {
				return err
			}
			return wantItem(b)
		}
	}
	return out, nil
}

// journalCheck checks project p's crawl journal: each of the project's n
// items of the load (project maps item ids to project ids) once, with its
// raw object's key, and nothing else.
func journalCheck(p string, project map[string]string, n int) objectCheck {
	return func(body []byte) error {
		var j struct {
			ProjectID string `json:"project_id"`
			Items     []struct {
				ItemID    string `json:"item_id"`
				Platform  string `json:"platform"`
				ObjectKey string `json:"object_key"`
			} `json:"items"`
		}
		if err := json.Unmarshal(body, &j); err != nil {
			return fmt.Errorf("not a crawl journal: %w", err)
		}
		if j.ProjectID != p {
			return fmt.Errorf("journal of %s names project %q", p, j.ProjectID)
		}
		seen := map[string]bool{}
		for _, it := range j.Items {
			if project[it.ItemID] != p || seen[it.ItemID] || it.ObjectKey != smap.ObjectKey(it.Platform, it.ItemID) {
				return fmt.Errorf("journal of %s: item %s (object %s) not of the project, twice or misplaced", p, it.ItemID, it.ObjectKey)
			}
			seen[it.ItemID] = true
		}
		if len(seen) != n {
			return fmt.Errorf("journal of %s lists %d items, want %d", p, len(seen), n)
		}
		return nil
	}
}

// metaCheck is the check of project p's meta object: its id, a total of
// its items, sealed and completed (smap's completer retries the write of
// the completion time until it succeeds).
func (l *smapLoad) metaCheck(p string) objectCheck {
	return func(body []byte) error {
		var m struct {
			ProjectID   string    `json:"project_id"`
			Total       int64     `json:"total"`
			SealedAt    time.Time `json:"sealed_at"`
			CompletedAt time.Time `json:"completed_at"`
		}
		if err := json.Unmarshal(body, &m); err != nil {
			return fmt.Errorf("not a project meta: %w", err)
		}
		if m.ProjectID != p || m.Total != l.itemsPer() || m.SealedAt.IsZero() {
			return fmt.Errorf("meta %s: project %q, total %d (want %d), sealed at %s", p, m.ProjectID, m.Total, l.itemsPer(), m.SealedAt)
		}
		if m.CompletedAt.IsZero() {
			return fmt.Errorf("meta %s: no completed_at", p)
		}
		return nil
	}
}
