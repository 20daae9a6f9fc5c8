package console

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/groupctl"
)

// sample is one reading of a group's lag.
type sample struct {
	at        time.Time
	lag       map[string]int64 // "topic[partition]" → lag
	committed int64            // sum of committed offsets (for records/s)
}

// sampler keeps the lag samples of the last window per group. It is safe
// for concurrent use.
type sampler struct {
	window time.Duration
	mu     sync.Mutex
	groups map[string][]sample
}

func newSampler(window time.Duration) *sampler {
	return &sampler{window: window, groups: map[string][]sample{}}
}

// add records rep taken at now and drops samples older than the window.
func (s *sampler) add(now time.Time, rep groupctl.Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range rep.Groups {
		if g.Err != nil {
			continue
		}
		sm := sample{at: now, lag: map[string]int64{}}
		for _, p := range g.Partitions {
			if p.Err != nil {
				continue
			}
			sm.lag[partName(p.Topic, p.Partition)] = max(p.Lag, 0)
			sm.committed += max(p.Committed, 0)
		}
		list := append(s.groups[g.Group], sm)
		cut := 0
		for cut < len(list) && now.Sub(list[cut].at) > s.window {
			cut++
		}
		s.groups[g.Group] = list[cut:]
	}
}

// rate is the group's committed records per second over its last two
// samples, and whether there were two.
func (s *sampler) rate(group string) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.groups[group]
	if len(list) < 2 {
		return 0, false
	}
	a, b := list[len(list)-2], list[len(list)-1]
	dt := b.at.Sub(a.at).Seconds()
	if dt <= 0 {
		return 0, false
	}
	return max(float64(b.committed-a.committed), 0) / dt, true
}

// chart is the uPlot data of a group: times in Unix seconds, then one
// series per partition (null where a sample lacks it).
type chart struct {
	Labels []string   `json:"labels"`
	Data   [][]*int64 `json:"data"`
	Times  []int64    `json:"times"`
}

// chartOf returns the group's samples as a chart, and whether the group
// was sampled at all.
func (s *sampler) chartOf(group string) (chart, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list, ok := s.groups[group]
	if !ok {
		return chart{}, false
	}
	names := map[string]bool{}
	for _, sm := range list {
		for k := range sm.lag {
			names[k] = true
		}
	}
	c := chart{Labels: make([]string, 0, len(names)), Times: make([]int64, 0, len(list))}
	for k := range names {
		c.Labels = append(c.Labels, k)
	}
	sort.Strings(c.Labels)
	c.Data = make([][]*int64, len(c.Labels))
	for _, sm := range list {
		c.Times = append(c.Times, sm.at.Unix())
		for i, k := range c.Labels {
			var v *int64
			if l, ok := sm.lag[k]; ok {
				v = &l
			}
			c.Data[i] = append(c.Data[i], v)
		}
	}
	return c, true
}

// Sample reads every group's lag now and then every Config.SampleEvery
// until ctx ends; a failed reading is logged and skipped.
func (c *Console) Sample(ctx context.Context) {
	t := time.NewTicker(c.cfg.SampleEvery)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, c.cfg.SampleEvery+10*time.Second)
		rep, err := groupctl.Lag(rctx, c.adm)
		cancel()
		if err == nil {
			c.samples.add(time.Now(), rep)
		} else if ctx.Err() == nil {
			c.cfg.Logger.Warn("console: lag sample failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func partName(topic string, p int32) string { return fmt.Sprintf("%s[%d]", topic, p) }
