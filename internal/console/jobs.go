package console

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pipelines/smap"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/stages/progress"
)

// maxProjects bounds the smap projects the Jobs page lists.
const maxProjects = 500

type jobsData struct {
	Now       time.Time
	JobsTopic string
	Ticks     []ticks.JobState
	TicksErr  string
	HasRedis  bool
	Projects  []smap.Progress
	SmapErr   string
	More      bool
}

func (c *Console) jobs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	d := jobsData{Now: time.Now(), JobsTopic: c.cfg.JobsTopic, HasRedis: c.smapRdb != nil}
	all, err := ticks.ReadJobs(ctx, c.cfg.Kafka, c.cfg.JobsTopic, nil)
	if err != nil {
		d.TicksErr = err.Error()
	}
	for _, st := range ticks.Flatten(all) {
		d.Ticks = append(d.Ticks, *st)
	}
	sort.Slice(d.Ticks, func(i, j int) bool { return d.Ticks[i].JobKey < d.Ticks[j].JobKey })
	if d.HasRedis {
		d.Projects, d.More, err = c.smapProjects(ctx)
		if err != nil {
			d.SmapErr = err.Error()
		}
	}
	c.render(w, http.StatusOK, "jobs", "Jobs", d)
}

// smapProjects scans the progress hashes of smap projects (at most
// maxProjects; more reports whether there were others).
func (c *Console) smapProjects(ctx context.Context) (list []smap.Progress, more bool, err error) {
	tr, err := progress.New(c.smapRdb, progress.Config{Prefix: c.cfg.SmapKeyPrefix})
	if err != nil {
		return nil, false, err
	}
	it := c.smapRdb.Scan(ctx, 0, c.cfg.SmapKeyPrefix+"*", 200).Iterator()
	for it.Next(ctx) {
		id := strings.TrimPrefix(it.Val(), c.cfg.SmapKeyPrefix)
		if progress.CheckJobID(id) != nil {
			continue // an :items or :found set
		}
		if len(list) == maxProjects {
			more = true
			break
		}
		st, err := tr.Get(ctx, id)
		if err != nil {
			return list, more, err
		}
		if st.Status == progress.StatusNotFound {
			continue // expired between the scan and the read
		}
		list = append(list, smap.ProgressOf(st))
	}
	if err := it.Err(); err != nil {
		return list, more, err
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ProjectID < list[j].ProjectID })
	return list, more, nil
}
