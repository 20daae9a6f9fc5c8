package ticks

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// The segment task's dead letter carries the source record's timestamp in
// dlq.source.timestamp, for redrive to restore.
func TestDeadLetterKeepsSourceTimestamp(t *testing.T) {
	t.Parallel()
	w := &worker{cfg: Config{DLQTopic: "ingest.dlq", Now: time.Now}}
	m := stages.Msg[taskIn]{Key: "job", Value: taskIn{raw: []byte(`{}`)},
		Source: stages.Source{Topic: "ingest.tasks", Partition: 1, Offset: 3, Timestamp: time.UnixMilli(1714553998250)}}
	r := w.dlqRecord(m, stages.ReasonRetriesExhausted, errors.New("504"), 3)
	var got []string
	for _, h := range r.Headers {
		if h.Key == stages.HeaderSourceTimestamp {
			got = append(got, string(h.Value))
		}
	}
	if len(got) != 1 || got[0] != "2024-05-01T08:59:58.25Z" {
		t.Fatalf("%s headers %q, want one, 2024-05-01T08:59:58.25Z", stages.HeaderSourceTimestamp, got)
	}
}
