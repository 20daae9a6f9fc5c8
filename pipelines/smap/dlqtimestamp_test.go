package smap

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// The analytics dead letter carries the source record's timestamp in
// dlq.source.timestamp, for redrive to restore.
func TestAnalyticsDeadLetterKeepsSourceTimestamp(t *testing.T) {
	t.Parallel()
	a := &analytics{cfg: Config{AnalyticsErrorsTopic: "smap.analytics.errors"}}
	m := stages.Msg[collectedMsg]{Key: "item", Value: collectedMsg{Raw: []byte(`{}`)},
		Source: stages.Source{Topic: "smap.data.collected", Partition: 2, Offset: 7, Timestamp: time.UnixMilli(1714553998250)}}
	r := a.dlqRecord(m, &failure{reason: stages.ReasonException, rule: RuleRawJSON, err: errors.New("boom")}, 1, time.Now().UTC())
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
