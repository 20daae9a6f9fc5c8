package testkit

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// roundTrip produces one record to a fresh topic and consumes it back.
func roundTrip(t *testing.T, k *Kafka) {
	t.Helper()
	topic := k.Topic(t, "rt", 3)
	ctx := Context(t)
	prod := k.Client(t)
	want := &kgo.Record{Topic: topic, Key: []byte("k1"), Value: []byte(`{"n":1}`)}
	if err := prod.ProduceSync(ctx, want).FirstErr(); err != nil {
		t.Fatalf("produce to %s on %s: %v", topic, k, err)
	}
	cons := k.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumerGroup(Name(t, "g")),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record consumed from %s: %v", topic, err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatalf("fetch from %s: %v", topic, errs)
		}
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		if len(recs) != 1 || string(recs[0].Key) != "k1" || string(recs[0].Value) != `{"n":1}` || recs[0].Partition != want.Partition {
			t.Fatalf("consumed %d records, first %q=%q p%d; want one k1={\"n\":1} p%d", len(recs), recs[0].Key, recs[0].Value, recs[0].Partition, want.Partition)
		}
		return
	}
}

func TestKafkaRoundTrip(t *testing.T) {
	t.Parallel()
	k := NewKafka(t, FakeOK())
	t.Logf("using %s %v", k, k.Brokers)
	if (k.Fake() != nil) == k.Real {
		t.Fatalf("%s: Real=%v but Fake()=%v", k, k.Real, k.Fake())
	}
	roundTrip(t, k)
}

func TestKafkaFake(t *testing.T) {
	t.Setenv("KAFKA_BROKERS", "")
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/no-docker.sock")
	k := NewKafka(t, FakeOK())
	if k.Kind != "kfake" || k.Real || k.Fake() == nil || len(k.Brokers) != 1 {
		t.Fatalf("got %s real=%v fake=%v brokers=%v, want one kfake broker", k, k.Real, k.Fake(), k.Brokers)
	}
	if got := k.Fake().ListenAddrs(); got[0] != k.Brokers[0] {
		t.Fatalf("Brokers %v, kfake listens on %v", k.Brokers, got)
	}
	roundTrip(t, k)
}

func TestKafkaEnvPrecedence(t *testing.T) {
	t.Setenv("KAFKA_BROKERS", "bogus.invalid:9092, other.invalid:9093")
	k := NewKafka(t, FakeOK())
	if k.Kind != "env" || !k.Real || k.Fake() != nil {
		t.Fatalf("got %s real=%v fake=%v, want the env brokers", k, k.Real, k.Fake())
	}
	if len(k.Brokers) != 2 || k.Brokers[0] != "bogus.invalid:9092" || k.Brokers[1] != "other.invalid:9093" {
		t.Fatalf("Brokers = %q", k.Brokers)
	}
	if len(k.Config.Brokers) != 2 {
		t.Fatalf("Config.Brokers = %q", k.Config.Brokers)
	}

	f := NewKafka(t, ForceFake())
	if f.Kind != "kfake" || f.Fake() == nil || f.Real {
		t.Fatalf("ForceFake with KAFKA_BROKERS set: got %s fake=%v", f, f.Fake())
	}
}

func TestKafkaTopic(t *testing.T) {
	t.Parallel()
	k := NewKafka(t, FakeOK())
	compact, ms := "compact", "3600000"
	topic := k.Topic(t, "orders.v1", 4,
		map[string]*string{"cleanup.policy": &compact},
		map[string]*string{"retention.ms": &ms})
	if !nameRE.MatchString(topic) || !regexpHasPrefix(topic, "orders_v1_testkafkatopic_") {
		t.Fatalf("topic name %q", topic)
	}
	adm := k.Admin(t)
	ctx := Context(t)
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if d := td[topic]; d.Err != nil || len(d.Partitions) != 4 {
		t.Fatalf("topic %s: err=%v partitions=%d, want 4", topic, d.Err, len(d.Partitions))
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range rc.Configs {
		got[c.Key] = c.MaybeValue()
	}
	if got["cleanup.policy"] != "compact" || got["retention.ms"] != "3600000" {
		t.Fatalf("configs cleanup.policy=%q retention.ms=%q", got["cleanup.policy"], got["retention.ms"])
	}
	if other := k.Topic(t, "orders.v1", 1); other == topic {
		t.Fatalf("two Topic calls returned %q", topic)
	}
}

func regexpHasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }
