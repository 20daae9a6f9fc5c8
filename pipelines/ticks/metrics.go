package ticks

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// metrics are the ticks pipeline's own collectors; the runtime adds the
// generic ones (paused partitions, retries, DLQ, lag) and the limiter its
// allowed/denied counters, on the same registerer.
type metrics struct {
	ticks       prometheus.Counter
	segments    *prometheus.CounterVec // result: written|skipped|empty
	zombies     prometheus.Counter
	dropped     *prometheus.CounterVec // why: stale|duplicate|out_of_order|has_state
	sourceErrs  *prometheus.CounterVec // type
	jobs        *prometheus.CounterVec // status reached: PENDING|RUNNING|COMPLETED|FAILED|STALLED
	stalled     prometheus.Counter
	bootstraps  prometheus.Counter
	fetchTime   prometheus.Histogram
	overwritten prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &metrics{
		ticks: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ticks_fetched_total", Help: "Ticks fetched from the tick source."}),
		segments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_ticks_segments_total", Help: "Segment tasks done, per result: written (a file), skipped (same-instance file existed), empty (no ticks).",
		}, []string{"result"}),
		zombies: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ticks_zombie_tasks_total", Help: "Tasks dropped because their job_instance_id is not the job's."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_ticks_dropped_tasks_total", Help: "Tasks of the current instance dropped, per reason.",
		}, []string{"why"}),
		sourceErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_ticks_source_errors_total", Help: "Failed tick-source calls and writes, per error type.",
		}, []string{"type"}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_ticks_job_transitions_total", Help: "Job status changes, per new status.",
		}, []string{"status"}),
		stalled:     prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ticks_stalled_jobs_total", Help: "Jobs marked STALLED."}),
		bootstraps:  prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ticks_bootstrapped_jobs_total", Help: "Job states rebuilt from the object store."}),
		overwritten: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ticks_foreign_segments_replaced_total", Help: "Segment files of another instance replaced."}),
		fetchTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_ticks_fetch_duration_seconds", Help: "Tick-source call latency.", Buckets: prometheus.ExponentialBuckets(0.001, 3, 12),
		}),
	}
	var err error
	reg2 := func(c prometheus.Collector) prometheus.Collector {
		if err == nil {
			// A second worker in one process shares the first one's collectors.
			c, err = promreg.Register(reg, c)
		}
		return c
	}
	m.ticks = reg2(m.ticks).(prometheus.Counter)
	m.segments = reg2(m.segments).(*prometheus.CounterVec)
	m.zombies = reg2(m.zombies).(prometheus.Counter)
	m.dropped = reg2(m.dropped).(*prometheus.CounterVec)
	m.sourceErrs = reg2(m.sourceErrs).(*prometheus.CounterVec)
	m.jobs = reg2(m.jobs).(*prometheus.CounterVec)
	m.stalled = reg2(m.stalled).(prometheus.Counter)
	m.bootstraps = reg2(m.bootstraps).(prometheus.Counter)
	m.fetchTime = reg2(m.fetchTime).(prometheus.Histogram)
	m.overwritten = reg2(m.overwritten).(prometheus.Counter)
	if err != nil {
		return nil, err
	}
	// Every status at 0 from the start: a series that appears only with its
	// first transition, at 1, is invisible to increase() (the FAILED alert).
	for _, s := range []Status{StatusPending, StatusRunning, StatusCompleted, StatusFailed, StatusStalled} {
		m.jobs.WithLabelValues(string(s))
	}
	// Likewise every error type the worker and the shipped sources report
	// (a Source may add its own, which appear with their first error).
	for _, typ := range []string{ErrTypeGatewayTimeout, ErrTypePacing, ErrTypeNoContract, ErrTypeStorage, ErrTypeUnknown, errTypeInternalTimeout} {
		m.sourceErrs.WithLabelValues(typ)
	}
	return m, nil
}
