package dlq_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/dlq"
)

// Redrive re-publishes a record stamped with the time of the redrive, not
// the original's (dlq.source.timestamp), whether or not the dead letter
// carries that header: an old timestamp would let the source topic's
// time-based retention delete the re-driven record at once.
func TestRedriveStampsRedriveTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write(t, e.dlqTopic,
		spec{key: "with", value: "1", reason: "sanity_fail", srcTopic: e.src, srcPartition: 0, srcOffset: 1, failedAt: t0, redrives: -1,
			extra: []kgo.RecordHeader{{Key: stages.HeaderSourceTimestamp, Value: []byte("2024-05-01T08:59:58.25Z")}}},
		spec{key: "without", value: "2", reason: "sanity_fail", srcTopic: e.src, srcPartition: 0, srcOffset: 2, failedAt: t0, redrives: -1})
	before := time.Now().Add(-time.Second)
	res, err := dlq.Redrive(ctxT(t), e.opts, dlq.RedriveRequest{DLQTopic: e.dlqTopic})
	if err != nil || res.Sent != 2 {
		t.Fatalf("redrive: %+v, %v; want 2 sent", res, err)
	}
	got := map[string]time.Time{}
	for _, r := range e.k.ReadTopic(t, e.src) {
		got[string(r.Key)] = r.Timestamp
		if _, ok := testkit.Header(r, stages.HeaderSourceTimestamp); ok {
			t.Errorf("%s: re-published with a dlq.source.timestamp header", r.Key)
		}
	}
	for _, k := range []string{"with", "without"} {
		if got[k].Before(before) {
			t.Errorf("%s: timestamp %v, want the time of the redrive (after %v)", k, got[k], before)
		}
	}
}

func TestParseSourceTimestamp(t *testing.T) {
	t.Parallel()
	r, err := dlq.Parse(&kgo.Record{Topic: "d", Headers: []kgo.RecordHeader{{Key: stages.HeaderSourceTimestamp, Value: []byte("2024-05-01T08:59:58.25Z")}}})
	if err != nil || !r.SourceTimestamp.Equal(time.Date(2024, 5, 1, 8, 59, 58, 250e6, time.UTC)) {
		t.Fatalf("Parse: %v, source timestamp %v", err, r.SourceTimestamp)
	}
	r, err = dlq.Parse(&kgo.Record{Topic: "d", Headers: []kgo.RecordHeader{{Key: stages.HeaderSourceTimestamp, Value: []byte("1714553998250")}}})
	if err == nil || !strings.Contains(err.Error(), stages.HeaderSourceTimestamp) || !r.SourceTimestamp.IsZero() {
		t.Fatalf("malformed: err %v, source timestamp %v; want an error naming the header and no timestamp", err, r.SourceTimestamp)
	}
	if v, ok := stages.SourceTimestamp(time.UnixMilli(1714553998250)); !ok || v != "2024-05-01T08:59:58.25Z" {
		t.Fatalf("SourceTimestamp = %q, %v", v, ok)
	}
	for _, none := range []time.Time{{}, time.UnixMilli(-1)} {
		if v, ok := stages.SourceTimestamp(none); ok {
			t.Fatalf("SourceTimestamp(%v) = %q, want no header", none, v)
		}
	}
}

// The loop guard bounds the depth of a fail → redrive → fail chain, not
// repeats: a DLQ record keeps its dlq.redrive_count, so every redrive run
// that matches it sends it again, each time with the same count.
func TestRedriveRunsResendBelowTheLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write(t, e.dlqTopic, spec{key: "a", value: "1", reason: "exception", srcTopic: e.src, srcPartition: 0, failedAt: t0, redrives: 0})
	for run := range 2 {
		res, err := dlq.Redrive(ctxT(t), e.opts, dlq.RedriveRequest{DLQTopic: e.dlqTopic, MaxRedrives: 1})
		if err != nil || res.Sent != 1 || res.Refused != 0 {
			t.Fatalf("run %d: %+v, %v; want 1 sent", run+1, res, err)
		}
	}
	got := e.k.ReadTopic(t, e.src)
	if len(got) != 2 {
		t.Fatalf("source got %d records after 2 runs, want 2", len(got))
	}
	for _, r := range got {
		if c, _ := testkit.Header(r, stages.HeaderRedriveCount); c != "1" {
			t.Fatalf("re-sent with %s %q, want 1 both times", stages.HeaderRedriveCount, c)
		}
	}
}
