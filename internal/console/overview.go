package console

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/sluicehq/sluice/internal/groupctl"
	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/stages/run"
)

// groupView is one consumer group on the overview.
type groupView struct {
	Pipeline, Group, Input, DLQ string
	Found                       bool // the cluster knows the group
	Lag                         groupctl.GroupLag
	Rate                        float64
	HasRate                     bool
	Assigned                    map[string][]string // member → partitions
}

// flagView is one control flag: its last value on the flags topic and, when
// PostgreSQL is configured, its control_flags row.
type flagView struct {
	Name             string
	Value            silver.FlagValue
	DBValue          *bool
	DBUpdated        time.Time
	HasDB, InDBTable bool
}

type overviewData struct {
	Groups  []groupView
	Other   []groupView // groups no pipeline declares
	Flags   []flagView
	FlagErr string
	Every   time.Duration
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	rep, err := groupctl.Lag(ctx, c.adm)
	if err != nil {
		c.fail(w, http.StatusBadGateway, "reading the consumer groups failed: "+err.Error())
		return
	}
	d := overviewData{Every: c.cfg.SampleEvery}
	declared := map[string]bool{}
	for _, s := range c.cfg.Pipelines {
		for _, in := range s.Consumers {
			declared[in.Group] = true
			gv := groupView{Pipeline: s.Name, Group: in.Group, Input: in.Input, DLQ: in.DLQ}
			gv.Lag, gv.Found = rep.Group(in.Group)
			c.fillGroup(&gv)
			d.Groups = append(d.Groups, gv)
		}
	}
	for _, g := range rep.Groups {
		if !declared[g.Group] {
			gv := groupView{Group: g.Group, Lag: g, Found: true}
			c.fillGroup(&gv)
			d.Other = append(d.Other, gv)
		}
	}
	d.Flags, err = c.readFlags(ctx)
	if err != nil {
		d.FlagErr = err.Error()
	}
	c.render(w, http.StatusOK, "overview", "Overview", d)
}

func (c *Console) fillGroup(gv *groupView) {
	gv.Rate, gv.HasRate = c.samples.rate(gv.Group)
	gv.Assigned = map[string][]string{}
	for _, p := range gv.Lag.Partitions {
		if p.Member != "" {
			gv.Assigned[p.Member] = append(gv.Assigned[p.Member], partName(p.Topic, p.Partition))
		}
	}
}

// readFlags reads the flags topic to its end (the last value per flag) and
// the control_flags table when PostgreSQL is configured.
func (c *Console) readFlags(ctx context.Context) ([]flagView, error) {
	st, err := run.NewStore(run.StoreConfig[silver.FlagValue]{Name: "console-flags", Topic: c.cfg.FlagsTopic,
		Encode: func(v silver.FlagValue) ([]byte, error) { return json.Marshal(v) },
		Decode: func(b []byte) (silver.FlagValue, error) {
			var v silver.FlagValue
			err := json.Unmarshal(b, &v)
			return v, err
		}})
	if err != nil {
		return nil, err
	}
	byPart, err := st.Read(ctx, c.cfg.Kafka, nil)
	if err != nil {
		return nil, err
	}
	byName := map[string]*flagView{}
	for _, m := range byPart {
		for k, v := range m {
			byName[k] = &flagView{Name: k, Value: v}
		}
	}
	if c.cfg.Postgres != nil {
		rows, err := c.cfg.Postgres.Query(ctx, `SELECT name, value, updated_at FROM control_flags`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				name string
				val  bool
				at   time.Time
			)
			if err := rows.Scan(&name, &val, &at); err != nil {
				return nil, err
			}
			f := byName[name]
			if f == nil {
				f = &flagView{Name: name}
				byName[name] = f
			}
			f.DBValue, f.DBUpdated, f.InDBTable = &val, at, true
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	out := make([]flagView, 0, len(byName))
	for _, f := range byName {
		f.HasDB = c.cfg.Postgres != nil
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// lagJSON serves a group's sampled lag for the chart.
func (c *Console) lagJSON(w http.ResponseWriter, r *http.Request) {
	g := r.URL.Query().Get("group")
	ch, ok := c.samples.chartOf(g)
	if !ok {
		http.Error(w, "no samples of group "+g+" (unknown group, or not sampled yet)", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ch)
}
