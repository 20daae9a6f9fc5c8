package run_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

func TestDLQHeaders(t *testing.T) {
	t.Parallel()
	own := []stages.Header{
		{Key: "trace", Value: []byte("t1")},
		{Key: stages.HeaderReason, Value: []byte("old")},     // an earlier dead letter's: dropped
		{Key: stages.HeaderRedriveCount, Value: []byte("2")}, // kept for the loop guard
	}
	ts := time.Date(2024, 5, 1, 9, 0, 0, 123e6, time.UTC)
	d := run.DLQMeta{
		Reason: stages.ReasonSanityFail, Rule: "ta.symbol", Error: strings.Repeat("é", 5000), Stage: "silver",
		Source:   stages.Source{Topic: "bronze.records", Partition: 3, Offset: 42, Timestamp: ts},
		Attempts: 1, FailedAt: time.Date(2024, 5, 1, 16, 0, 0, 5e8, time.FixedZone("ICT", 7*3600)),
	}
	hs := run.DLQHeaders(own, d)
	want := []string{
		"trace=t1", stages.HeaderRedriveCount + "=2",
		stages.HeaderReason + "=sanity_fail", stages.HeaderRule + "=ta.symbol", stages.HeaderError + "=",
		stages.HeaderStage + "=silver", stages.HeaderSourceTopic + "=bronze.records",
		stages.HeaderSourcePartition + "=3", stages.HeaderSourceOffset + "=42", stages.HeaderAttempts + "=1",
		stages.HeaderFailedAt + "=2024-05-01T09:00:00Z", stages.HeaderSourceTimestamp + "=2024-05-01T09:00:00.123Z",
	}
	if len(hs) != len(want) {
		t.Fatalf("%d headers, want %d", len(hs), len(want))
	}
	for i, h := range hs {
		got := h.Key + "=" + string(h.Value)
		if h.Key == stages.HeaderError {
			if len(h.Value) > 4<<10 || !strings.HasSuffix(got, "more bytes cut)") {
				t.Errorf("dlq.error of %d bytes, not cut to 4 KiB: …%s", len(h.Value), got[max(0, len(got)-40):])
			}
			got = h.Key + "="
		}
		if got != want[i] {
			t.Errorf("header %d = %q, want %q", i, got, want[i])
		}
	}
	// No source timestamp (-1 in Kafka): no dlq.source.timestamp.
	d.Source.Timestamp = time.UnixMilli(-1)
	for _, h := range run.DLQHeaders(nil, d) {
		if h.Key == stages.HeaderSourceTimestamp {
			t.Errorf("dlq.source.timestamp %q for a record without a timestamp", h.Value)
		}
	}
}
