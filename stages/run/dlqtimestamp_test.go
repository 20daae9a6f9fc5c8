package run_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/dlq"
)

// A dead letter written by the runtime carries the source record's Kafka
// timestamp in dlq.source.timestamp (the DLQ record's own timestamp stays
// the time it was dead-lettered); a redrive re-publishes the record stamped
// with the time of the redrive.
func TestDeadLetterKeepsSourceTimestamp(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	in := cfg.Topics[0]
	// Recent: a real broker's time-based retention deletes records older
	// than retention.ms (7 days by default) within minutes.
	srcTime := time.Now().Add(-time.Hour).Truncate(time.Second).Add(123 * time.Millisecond).UTC()
	wantHeader := srcTime.Format(time.RFC3339Nano)
	cl := k.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx,
		&kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("poison"), Timestamp: srcTime},
		&kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("fine"), Timestamp: srcTime.Add(time.Second)},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	stage := func(_ context.Context, m msg) ([]msg, error) {
		if m.Value == "poison" {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "test.poison", errors.New("value is poison"))
		}
		return []msg{m}, nil
	}
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, sink)
	testkit.WaitFor(t, 30*time.Second, "the valid record", func() bool { return sink.Len() == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	src := k.ReadTopic(t, in)
	if len(src) != 2 || !src[0].Timestamp.Equal(srcTime) {
		t.Fatalf("source topic: %d records, first at %v; want 2, the first at %v (CreateTime)", len(src), src[0].Timestamp, srcTime)
	}
	dl := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
	if len(dl) != 1 {
		t.Fatalf("DLQ has %d records, want 1", len(dl))
	}
	if got, _ := testkit.Header(dl[0], stages.HeaderSourceTimestamp); got != wantHeader || !strings.HasSuffix(got, ".123Z") {
		t.Fatalf("%s = %q, want %s", stages.HeaderSourceTimestamp, got, wantHeader)
	}
	if !dl[0].Timestamp.After(srcTime.Add(30 * time.Minute)) {
		t.Fatalf("the DLQ record's own timestamp is %v, want the time it was dead-lettered", dl[0].Timestamp)
	}

	// The redrive re-publishes the record stamped with the time of the
	// redrive.
	redriveStart := time.Now().Add(-time.Second)
	res, err := dlq.Redrive(ctx, k.Opts(t), dlq.RedriveRequest{DLQTopic: cfg.DLQTopic})
	if err != nil || res.Sent != 1 {
		t.Fatalf("redrive: %+v, %v; want 1 sent", res, err)
	}
	src = k.ReadTopic(t, in)
	if len(src) != 3 || string(src[2].Value) != "poison" || src[2].Timestamp.Before(redriveStart) {
		t.Fatalf("source topic after the redrive: %d records, last %q at %v; want the poison record again, stamped after %v", len(src), src[len(src)-1].Value, src[len(src)-1].Timestamp, redriveStart)
	}
}
