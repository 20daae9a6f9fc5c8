package run

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
	"github.com/sluicehq/sluice/stages"
)

// metrics are the runtime's Prometheus collectors for one pipeline. They
// carry a constant "pipeline" label so several runners can share a registry.
type metrics struct {
	in          *prometheus.CounterVec   // topic
	out         prometheus.Counter       // outputs handed to the sink
	dlq         *prometheus.CounterVec   // reason, rule
	dlqReasons  *prometheus.CounterVec   // reason: dlq without the rule (see deadLettered)
	retries     *prometheus.CounterVec   // kind: stage|sink|dlq
	waits       prometheus.Counter       // stage waits (stages.Wait)
	waitSeconds prometheus.Counter       // time spent in them
	stageDur    prometheus.Histogram     // per record
	sinkDur     prometheus.Histogram     // per Write
	batchSize   prometheus.Histogram     // records per batch
	lag         *prometheus.GaugeVec     // topic, partition
	paused      prometheus.Gauge         // paused partitions
	assigned    prometheus.Gauge         // assigned partitions
	committed   *prometheus.CounterVec   // topic: records marked for commit
	errors      *prometheus.CounterVec   // kind: fetch|commit|fatal|abandoned|restore|claim
	skipped     *prometheus.CounterVec   // topic: offsets deleted before they were consumed
	batchDur    *prometheus.HistogramVec // phase: process|write|dlq
	merged      prometheus.Counter       // outputs merged into an earlier one in a window that was written
	windowKeys  atomic.Int64             // keys held by the open windows (gauge sluice_window_keys)
}

// newMetrics registers the collectors of pipeline on reg (nil: a private
// registry) and exports at 0 the series of the label values known in
// advance: every kind of the error and retry counters, every design DLQ
// reason and every input topic of skipped offsets.
func newMetrics(reg prometheus.Registerer, pipeline string, topics []string) (*metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry() // private, unexported registry: metrics are collected but not served
	}
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": pipeline}, reg)
	lat := prometheus.ExponentialBuckets(0.00001, 4, 12) // 10µs … ~42s
	f := promreg.Exclusive(reg)
	m := &metrics{
		in:          f.CounterVec("sluice_records_in_total", "Records consumed, per topic.", "topic"),
		out:         f.Counter("sluice_records_out_total", "Stage outputs handed to the sink."),
		dlq:         f.CounterVec("sluice_dlq_records_total", "Records dead-lettered, per reason and rule.", "reason", "rule"),
		dlqReasons:  f.CounterVec("sluice_dlq_records_by_reason_total", "Records dead-lettered, per reason: sluice_dlq_records_total summed over rules, with every DLQ reason of the design exported at 0 from the start (alert on this one).", "reason"),
		retries:     f.CounterVec("sluice_retries_total", "Retries, per kind (stage, sink, dlq).", "kind"),
		waits:       f.Counter("sluice_runtime_waits_total", "Stage waits (stages.Wait: a rate-limit denial, a Retry-After): the record's partition paused and the stage called again without spending an attempt."),
		waitSeconds: f.Counter("sluice_runtime_wait_seconds_total", "Seconds spent in stage waits (stages.Wait), cut short ones included."),
		stageDur:    f.Histogram("sluice_stage_duration_seconds", "Stage latency per record.", lat),
		sinkDur:     f.Histogram("sluice_sink_write_duration_seconds", "Sink Write latency per batch.", lat),
		batchSize:   f.Histogram("sluice_batch_records", "Records per batch.", prometheus.ExponentialBuckets(1, 2, 14)),
		lag:         f.GaugeVec("sluice_consumer_lag", "Records between the partition's position (after its last batch done) and its end offset, per assigned partition; listed every 5s.", "topic", "partition"),
		paused:      f.Gauge("sluice_paused_partitions", "Partitions whose fetches are paused."),
		assigned:    f.Gauge("sluice_assigned_partitions", "Partitions assigned to this member."),
		committed:   f.CounterVec("sluice_records_done_total", "Records whose effects are durable and whose offsets are marked for commit.", "topic"),
		errors:      f.CounterVec("sluice_runtime_errors_total", "Runtime errors, per kind (fetch, commit, fatal, abandoned, restore: a failed state store restore read, retried; claim: a failed claim from the offset store, retried).", "kind"),
		skipped:     f.CounterVec("sluice_offsets_skipped_total", "Offsets deleted from the log (retention, DeleteRecords) before the group consumed them, per topic: their records never reached the pipeline.", "topic"),
		batchDur:    f.HistogramVec("sluice_batch_phase_duration_seconds", "Batch time per phase (process, write, dlq).", lat, "phase"),
		merged:      f.Counter("sluice_window_merged_total", "Outputs merged into an earlier output of the same key in a coalescing window, counted when the window is written (writes saved); a window dropped unwritten (abandoned, partition lost, failed write at stop) counts nothing."),
	}
	windowKeys := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_window_keys", Help: "Keys held by the open coalescing windows of all assigned partitions (memory under a backlog).",
	}, func() float64 { return float64(m.windowKeys.Load()) })
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := reg.Register(windowKeys); err != nil {
		return nil, err
	}
	// Export the fixed kinds at 0 from the start: a series that appears only
	// with its first event, at 1, is invisible to increase() and rate().
	for _, kind := range []string{"fetch", "commit", "fatal", "abandoned", "restore", "claim"} {
		m.errors.WithLabelValues(kind)
	}
	for _, kind := range []string{"stage", "sink", "dlq"} {
		m.retries.WithLabelValues(kind)
	}
	// The rule label of sluice_dlq_records_total is open-ended, so its
	// series cannot be exported in advance; the per-reason counter can.
	for _, reason := range designReasons() {
		m.dlqReasons.WithLabelValues(string(reason))
	}
	// A skip is usually a single event (a consumer that fell behind
	// retention): its series must exist before it for increase() to see it.
	for _, topic := range topics {
		m.skipped.WithLabelValues(topic)
	}
	return m, nil
}

// deadLettered counts one dead letter, produced (acknowledged by the DLQ
// topic, or committed with its transaction), of the given reason and rule.
// It is the only writer of both DLQ counters, so that
// sluice_dlq_records_by_reason_total{reason} always equals the sum over rules
// of sluice_dlq_records_total{reason,rule}.
func (m *metrics) deadLettered(reason stages.Reason, rule string) {
	m.dlq.WithLabelValues(string(reason), rule).Inc()
	m.dlqReasons.WithLabelValues(string(reason)).Inc()
}
