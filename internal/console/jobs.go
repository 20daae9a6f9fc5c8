package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sluicehq/sluice/pipelines/smap"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/pipelines/trades"
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

	TradesTopic string
	Imports     []trades.ImportState
	TradesErr   string
	HasDB       bool
	Modules     modulesMatrix
	ModulesErr  string
}

func (c *Console) jobs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	d := jobsData{Now: time.Now(), JobsTopic: c.cfg.JobsTopic, HasRedis: c.smapRdb != nil,
		TradesTopic: c.cfg.TradesStateTopic, HasDB: c.cfg.Postgres != nil}
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
	d.Imports, err = c.tradesImports(ctx)
	if err != nil {
		d.TradesErr = err.Error()
	}
	if d.HasDB {
		d.Modules, err = c.modulesMatrix(ctx)
		if err != nil {
			d.ModulesErr = err.Error()
		}
	}
	c.render(w, http.StatusOK, "jobs", "Jobs", d)
}

// tradesImports returns every import state of the import-state topic,
// newest first (at most maxProjects); a missing topic is no import yet.
func (c *Console) tradesImports(ctx context.Context) ([]trades.ImportState, error) {
	exists, err := c.topicExists(ctx, c.cfg.TradesStateTopic)
	if err != nil || !exists {
		return nil, err
	}
	all, err := trades.ReadImports(ctx, c.cfg.Kafka, c.cfg.TradesStateTopic)
	if err != nil {
		return nil, err
	}
	list := make([]trades.ImportState, 0, len(all))
	for _, st := range all {
		list = append(list, st)
	}
	sort.Slice(list, func(i, j int) bool {
		if !list[i].UpdatedAt.Equal(list[j].UpdatedAt) {
			return list[i].UpdatedAt.After(list[j].UpdatedAt)
		}
		return list[i].ImportID < list[j].ImportID
	})
	return list[:min(len(list), maxProjects)], nil
}

// maxModuleRows bounds the ticker × module rows the matrix reads.
const maxModuleRows = 5000

// modulesMatrix is ticker × module from the view ticker_modules_status:
// Cells[i][j] is Tickers[i]'s Modules[j] (Freshness "" when the ticker has
// no row for that module).
type modulesMatrix struct {
	Tickers, Modules []string
	Cells            [][]moduleCell
	More             bool
}

type moduleCell struct {
	Freshness, Status, LastError string
	FetchedAt                    *time.Time
}

// modulesMatrix reads ticker_modules_status (at most maxModuleRows rows).
func (c *Console) modulesMatrix(ctx context.Context) (modulesMatrix, error) {
	rows, err := c.cfg.Postgres.Query(ctx, `SELECT ticker::text, module_id, status, freshness_status, fetched_at, COALESCE(last_error, '')
		FROM ticker_modules_status ORDER BY ticker, module_id LIMIT $1`, maxModuleRows+1)
	if err != nil {
		return modulesMatrix{}, fmt.Errorf("read ticker_modules_status: %w", err)
	}
	defer rows.Close()
	type row struct {
		ticker, module string
		cell           moduleCell
	}
	var all []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.ticker, &r.module, &r.cell.Status, &r.cell.Freshness, &r.cell.FetchedAt, &r.cell.LastError); err != nil {
			return modulesMatrix{}, fmt.Errorf("read ticker_modules_status: %w", err)
		}
		all = append(all, r)
	}
	if err := rows.Err(); err != nil {
		return modulesMatrix{}, fmt.Errorf("read ticker_modules_status: %w", err)
	}
	var m modulesMatrix
	if len(all) > maxModuleRows {
		all, m.More = all[:maxModuleRows], true
	}
	ti, mi := map[string]int{}, map[string]int{}
	for _, r := range all {
		if _, ok := ti[r.ticker]; !ok {
			ti[r.ticker] = len(m.Tickers)
			m.Tickers = append(m.Tickers, r.ticker)
		}
		if _, ok := mi[r.module]; !ok {
			mi[r.module] = 0
			m.Modules = append(m.Modules, r.module)
		}
	}
	sort.Strings(m.Modules)
	for j, mod := range m.Modules {
		mi[mod] = j
	}
	m.Cells = make([][]moduleCell, len(m.Tickers))
	for i := range m.Cells {
		m.Cells[i] = make([]moduleCell, len(m.Modules))
	}
	for _, r := range all {
		m.Cells[ti[r.ticker]][mi[r.module]] = r.cell
	}
	return m, nil
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

// topicExists reports whether topic exists on the cluster.
func (c *Console) topicExists(ctx context.Context, topic string) (bool, error) {
	td, err := c.adm.ListTopics(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("describing %s failed: %w", topic, err)
	}
	d, ok := td[topic]
	return ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition), nil
}
