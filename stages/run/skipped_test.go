package run_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages/run"
)

// A group without a commit that starts at the log start of a topic whose
// early records were deleted skips nothing it ever had: neither runner
// reports a skip (kgo lists such a partition as committed at offset 0), and
// every record still in the log is processed.
func TestNewGroupReportsNoSkip(t *testing.T) {
	t.Parallel()
	const n, logStart = 40, 30
	setup := func(t *testing.T) (*testkit.Kafka, run.Config) {
		t.Helper()
		k := testkit.NewKafka(t, testkit.ForceFake())
		cfg := baseConfig(t, k, 1)
		produce(t, k.Client(t), cfg.Topics[0], n, 5, nil)
		if got := deleteRecords(t, k.Admin(t), cfg.Topics[0], 0, logStart); got != logStart {
			t.Fatalf("log start %d after DeleteRecords, want %d", got, logStart)
		}
		return k, cfg
	}
	check := func(t *testing.T, reg *prometheus.Registry, logs *logBuffer, topic string, processed []int64) {
		t.Helper()
		if got := testkit.Metric(t, reg, "sluice_offsets_skipped_total", "topic", topic); got != 0 {
			t.Errorf("sluice_offsets_skipped_total = %v for a group that never had the deleted records, want 0", got)
		}
		if l := logs.lines("records deleted before they were consumed"); len(l) != 0 {
			t.Errorf("want no WARN about deleted records, got %q", l)
		}
		if fmt.Sprint(processed) != fmt.Sprint([]int64{30, 31, 32, 33, 34, 35, 36, 37, 38, 39}) {
			t.Errorf("processed offsets %v, want %d..%d", processed, logStart, n-1)
		}
	}
	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		k, cfg := setup(t)
		var logs logBuffer
		reg := prometheus.NewRegistry()
		sink := memsink.New[msg]()
		_, stop := start(t, k, cfg, passthrough, sink, run.WithRegisterer(reg), run.WithLogger(logs.logger()))
		waitCommittedAtEnd(t, k.Admin(t), cfg.Group, cfg.Topics[0], 10*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		var processed []int64
		for _, m := range sink.Items() {
			processed = append(processed, m.Source.Offset)
		}
		check(t, reg, &logs, cfg.Topics[0], processed)
	})
}
