package smap

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages/run"
)

// platformSeries returns the value of each series of the metric name, by
// its platform label.
func platformSeries(t *testing.T, g prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "platform" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// The platform label maps a known platform to its slug whatever its case,
// admits maxPlatformLabels other short platforms, each keeping its label,
// and folds the rest — and any long one — into "other".
func TestPlatformLabel(t *testing.T) {
	t.Parallel()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{"TikTok": "tiktok", "youtube": "youtube", "": "unknown", "!!": "unknown", "news": "news", "Other": "other"} {
		if got := m.platform(in); got != want {
			t.Errorf("platform(%q) = %q, want %q", in, got, want)
		}
	}
	if got := m.platform(strings.Repeat("x", maxPlatformLabelLen+1)); got != otherPlatform {
		t.Errorf("a platform of %d bytes got label %q, want %q", maxPlatformLabelLen+1, got, otherPlatform)
	}
	for i := range maxPlatformLabels {
		if got, want := m.platform(fmt.Sprintf("Site%02d", i)), fmt.Sprintf("site%02d", i); got != want {
			t.Fatalf("platform %d: label %q, want %q", i, got, want)
		}
	}
	if got := m.platform("one-more"); got != otherPlatform {
		t.Errorf("platform beyond the bound: label %q, want %q", got, otherPlatform)
	}
	if got := m.platform("SITE00"); got != "site00" {
		t.Errorf("an admitted platform seen again: label %q, want site00", got)
	}
	if got := m.platform("facebook"); got != "facebook" {
		t.Errorf("a known platform after the bound: label %q, want facebook", got)
	}
}

// End to end: a project whose targets name many distinct platforms, some
// of them long, creates a bounded number of smap_* platform series — the
// known platforms keep their own, with exact counts — and every item,
// error and retry is still counted (under "other" when folded).
func TestPlatformSeriesBounded(t *testing.T) {
	pgs := testkit.NewPostgresServer(t)
	h := newHarness(t, pgs, harnessOpts{})
	h.cfg.CrawlRetry = run.RetryPolicy{MaxAttempts: 3, Initial: time.Millisecond, Max: 5 * time.Millisecond}
	d := h.start(h.cfg)
	const sites, long, dead, flaky = 40, 5, 30, 30
	targets := []Target{
		synthetic("tiktok", 2),
		{Platform: "YouTube", URL: "synthetic://youtube?items=1&fail=1"}, // one retry
		{Platform: "facebook", URL: "synthetic://facebook?fail=permanent"},
		synthetic("news", 1),
	}
	for i := range sites {
		targets = append(targets, synthetic(fmt.Sprintf("site%02d", i), 1))
	}
	for i := range long {
		targets = append(targets, synthetic(fmt.Sprintf("%s%d", strings.Repeat("l", 100), i), 1))
	}
	for i := range dead {
		targets = append(targets, Target{Platform: fmt.Sprintf("dead%02d", i), URL: "synthetic://x?fail=permanent"})
	}
	for i := range flaky {
		targets = append(targets, Target{Platform: fmt.Sprintf("flaky%02d", i), URL: "synthetic://x?items=1&fail=1"})
	}
	const id = "p-platforms"
	h.createProject(ProjectCreated{ProjectID: id, Targets: targets})
	const items = 2 + 1 + 1 + sites + long + flaky
	if st := h.waitDone(id, 60*time.Second); st.Total != items || st.Done != items {
		t.Fatalf("final state %+v, want total=done=%d", st, items)
	}

	// Targets are crawled in order: the first maxPlatformLabels sites are
	// admitted; the other sites, the long platforms and every dead and
	// flaky one are "other".
	admitted := map[string]float64{}
	for i := range maxPlatformLabels {
		admitted[fmt.Sprintf("site%02d", i)] = 1
	}
	for _, c := range []struct {
		metric string
		known  map[string]float64
		other  float64
		sites  bool
	}{
		{"smap_items_collected_total", map[string]float64{"tiktok": 2, "youtube": 1, "news": 1}, sites - maxPlatformLabels + long + flaky, true},
		{"smap_crawl_errors_total", map[string]float64{"facebook": 1}, dead, false},
		{"smap_crawl_retries_total", map[string]float64{"youtube": 1}, flaky, false},
	} {
		got := platformSeries(t, d.reg, c.metric)
		want := map[string]float64{otherPlatform: c.other}
		for k, v := range c.known {
			want[k] = v
		}
		if c.sites {
			for k, v := range admitted {
				want[k] = v
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d series, want %d (%v)", c.metric, len(got), len(want), got)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s{platform=%q} = %v, want %v", c.metric, k, got[k], v)
			}
		}
		for k := range got {
			if len(k) > maxPlatformLabelLen {
				t.Errorf("%s: a platform label of %d bytes", c.metric, len(k))
			}
		}
	}
}
