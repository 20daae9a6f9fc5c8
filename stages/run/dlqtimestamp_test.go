package run_test

import (
	"context"
	"errors"
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
// the time it was dead-lettered), and a redrive gives the re-published
// record that timestamp back instead of the time of the redrive.
func TestDeadLetterKeepsSourceTimestamp(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	in := cfg.Topics[0]
	srcTime := time.Date(2024, 5, 1, 9, 0, 0, 123e6, time.UTC)
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
	dl := k.ReadTopic(t, cfg.DLQTopic)
	if len(dl) != 1 {
		t.Fatalf("DLQ has %d records, want 1", len(dl))
	}
	if got, _ := testkit.Header(dl[0], stages.HeaderSourceTimestamp); got != "2024-05-01T09:00:00.123Z" {
		t.Fatalf("%s = %q, want 2024-05-01T09:00:00.123Z", stages.HeaderSourceTimestamp, got)
	}
	if dl[0].Timestamp.Before(time.Now().Add(-time.Hour)) {
		t.Fatalf("the DLQ record's own timestamp is %v, want the time it was dead-lettered", dl[0].Timestamp)
	}

	// The redrive re-publishes the record with its source timestamp.
	res, err := dlq.Redrive(ctx, k.Opts(t), dlq.RedriveRequest{DLQTopic: cfg.DLQTopic})
	if err != nil || res.Sent != 1 {
		t.Fatalf("redrive: %+v, %v; want 1 sent", res, err)
	}
	src = k.ReadTopic(t, in)
	if len(src) != 3 || string(src[2].Value) != "poison" || !src[2].Timestamp.Equal(srcTime) {
		t.Fatalf("source topic after the redrive: %d records, last %q at %v; want the poison record again at %v", len(src), src[len(src)-1].Value, src[len(src)-1].Timestamp, srcTime)
	}
}
