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

// newMetrics registers the collectors on reg (nil: none), or adopts the
// equal ones already registered (promreg.Shared): a second worker in one
// process shares the first one's collectors.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f := promreg.Shared(reg)
	m := &metrics{
		ticks:       f.Counter("sluice_ticks_fetched_total", "Ticks fetched from the tick source."),
		segments:    f.CounterVec("sluice_ticks_segments_total", "Segment tasks done, per result: written (a file), skipped (same-instance file existed), empty (no ticks).", "result"),
		zombies:     f.Counter("sluice_ticks_zombie_tasks_total", "Tasks dropped because their job_instance_id is not the job's."),
		dropped:     f.CounterVec("sluice_ticks_dropped_tasks_total", "Tasks of the current instance dropped, per reason.", "why"),
		sourceErrs:  f.CounterVec("sluice_ticks_source_errors_total", "Failed tick-source calls and writes, per error type.", "type"),
		jobs:        f.CounterVec("sluice_ticks_job_transitions_total", "Job status changes, per new status.", "status"),
		stalled:     f.Counter("sluice_ticks_stalled_jobs_total", "Jobs marked STALLED."),
		bootstraps:  f.Counter("sluice_ticks_bootstrapped_jobs_total", "Job states rebuilt from the object store."),
		overwritten: f.Counter("sluice_ticks_foreign_segments_replaced_total", "Segment files of another instance replaced."),
		fetchTime:   f.Histogram("sluice_ticks_fetch_duration_seconds", "Tick-source call latency.", prometheus.ExponentialBuckets(0.001, 3, 12)),
	}
	if err := f.Err(); err != nil {
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
