package pipelines_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
)

// instanceOf is the group instance id a client built from opts would join
// with ("" when none).
func instanceOf(t *testing.T, opts []kgo.Opt) string {
	t.Helper()
	cl, err := kgo.NewClient(append(opts, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id, _ := cl.OptValue(kgo.InstanceID).(string)
	return id
}

// Each consumer group of a process gets its own instance id, derived from
// Env.InstanceID and the group; without one the members stay dynamic, and
// the shared options are never changed.
func TestGroupKafkaInstanceID(t *testing.T) {
	seed := kgo.SeedBrokers("127.0.0.1:1")
	env := pipelines.Env{Kafka: make([]kgo.Opt, 1, 4), InstanceID: "sluice-silver-0"}
	env.Kafka[0] = seed
	if got := instanceOf(t, env.GroupKafka("silver")); got != "sluice-silver-0-silver" {
		t.Errorf("silver instance id %q, want sluice-silver-0-silver", got)
	}
	collector, analytics := env.GroupKafka("smap-collector"), env.GroupKafka("smap-analytics")
	if c, a := instanceOf(t, collector), instanceOf(t, analytics); c != "sluice-silver-0-smap-collector" || a != "sluice-silver-0-smap-analytics" {
		t.Errorf("instance ids %q and %q, want one per group", c, a)
	}
	if len(env.Kafka) != 1 || instanceOf(t, env.Kafka) != "" {
		t.Errorf("GroupKafka changed the shared options: %d of them", len(env.Kafka))
	}
	env.InstanceID = ""
	if got := instanceOf(t, env.GroupKafka("silver")); got != "" {
		t.Errorf("instance id %q without Env.InstanceID, want none", got)
	}
}
