package smap

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// Bounds of the platform label (see metrics.platform).
const (
	// otherPlatform is the label of the platforms folded together.
	otherPlatform = "other"
	// maxPlatformLabels is how many distinct platforms besides the known
	// ones (knownPlatform) get a label of their own per process.
	maxPlatformLabels = 20
	// maxPlatformLabelLen is the longest platform slug used as a label.
	maxPlatformLabelLen = 32
)

// knownPlatform reports whether slug is a platform the code names (the
// demo's tiktok, facebook and youtube, news) or one of the label's fixed
// values ("unknown": no platform; otherPlatform). A known platform always
// has a label of its own.
func knownPlatform(slug string) bool {
	switch slug {
	case "tiktok", "facebook", "youtube", "news", "unknown", otherPlatform:
		return true
	}
	return false
}

// platformLabels admits platform label values, at most maxPlatformLabels
// besides the known ones, first come first served.
type platformLabels struct {
	mu   sync.Mutex
	seen map[string]bool
}

// metrics are smap's domain metrics (the runners add the runtime's).
type metrics struct {
	projects    *prometheus.CounterVec   // outcome: crawled|skipped_done|resealed
	collected   *prometheus.CounterVec   // platform (see platform)
	crawlErrors *prometheus.CounterVec   // platform
	crawlRetry  *prometheus.CounterVec   // platform
	analysed    *prometheus.CounterVec   // result: ok | <dlq reason>
	analyseDur  prometheus.Histogram     // per item
	completions *prometheus.CounterVec   // repeat: false|true
	counted     *prometheus.CounterVec   // outcome: ok|error
	stateWrites *prometheus.HistogramVec // op

	platforms platformLabels
}

// platform returns the platform label of a target's or item's platform.
// Platforms come from the project.created input and are open-ended, so the
// label is bounded per metrics value (per process): the lowercased slug
// (platformSlug) of a known platform (knownPlatform); the slug of another
// platform if it is at most maxPlatformLabelLen bytes and among the first
// maxPlatformLabels such platforms seen; otherPlatform ("other") for the
// rest. The smap_* platform series are thus at most maxPlatformLabels plus
// the known ones per metric. Safe for concurrent use.
func (m *metrics) platform(platform string) string {
	slug := platformSlug(platform)
	if knownPlatform(slug) {
		return slug
	}
	if len(slug) > maxPlatformLabelLen {
		return otherPlatform
	}
	p := &m.platforms
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen[slug] {
		return slug
	}
	if len(p.seen) >= maxPlatformLabels {
		return otherPlatform
	}
	if p.seen == nil {
		p.seen = map[string]bool{}
	}
	p.seen[slug] = true
	return slug
}

// newMetrics registers the collectors on reg (nil: none); a collector
// already registered on reg is an error.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f := promreg.Exclusive(reg)
	buckets := prometheus.ExponentialBuckets(0.0001, 4, 10)
	m := &metrics{
		projects:    f.CounterVec("smap_projects_total", "Projects handled by the collector, per outcome (crawled; skipped_done; resealed: a duplicate of a sealed project; reannounced: the sealing record again, its items announced again).", "outcome"),
		collected:   f.CounterVec("smap_items_collected_total", "Items stored by the collector, per platform (re-crawls included; announced on smap.data.collected when the project is sealed).", "platform"),
		crawlErrors: f.CounterVec("smap_crawl_errors_total", "Targets skipped because their crawl failed (permanently, or transiently on every attempt), per platform.", "platform"),
		crawlRetry:  f.CounterVec("smap_crawl_retries_total", "Crawls of a target retried after a transient failure, per platform.", "platform"),
		analysed:    f.CounterVec("smap_items_analysed_total", "Items analysed, per result (ok or the DLQ reason).", "result"),
		analyseDur:  f.Histogram("smap_analysis_duration_seconds", "Load and analysis time per item.", buckets),
		completions: f.CounterVec("smap_completions_published_total", "smap.job.completed events acknowledged, per repeat (true: re-published after a crash).", "repeat"),
		counted:     f.CounterVec("smap_items_finished_total", "analysis.finished events consumed by the progress counter, per status.", "status"),
		stateWrites: f.HistogramVec("smap_state_op_duration_seconds", "Redis progress-state operations, per op.", buckets, "op"),
	}
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("smap: register metrics: %w", err)
	}
	return m, nil
}
