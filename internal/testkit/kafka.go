package testkit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/redpanda"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/kconf"
)

// RedpandaImage is the container image NewKafka runs when it uses Docker.
const RedpandaImage = "docker.redpanda.com/redpandadata/redpanda:v25.2.4"

// KfakeDefaultPartitions is the partition count kfake gives a topic created
// without one (auto-creation, or CreateTopics with -1), matching Kafka's
// num.partitions default.
const KfakeDefaultPartitions = 1

// containerStartTimeout bounds starting a container, image pull included.
const containerStartTimeout = 3 * time.Minute

// Kafka is a Kafka cluster for one test. Its methods are safe for
// concurrent use.
type Kafka struct {
	// Brokers are the seed brokers.
	Brokers []string
	// Real is false when the cluster is the in-process kfake.
	Real bool
	// Kind is where the cluster came from: "env" (KAFKA_BROKERS),
	// "redpanda-container" or "kfake".
	Kind string
	// Config is the connection config for code under test that takes a
	// kconf.Config. For "env" it is kconf.FromEnv (SASL/TLS included).
	Config kconf.Config

	fake *kfake.Cluster
}

// NewKafka hands the test a Kafka cluster. Order: KAFKA_BROKERS (with the
// other KAFKA_* settings of kconf.FromEnv; the brokers are not contacted
// here); a Redpanda container when a Docker engine answers; an in-process
// kfake cluster with one broker when FakeOK is given (closed on cleanup);
// else the test is skipped (failed under CI=true). ForceFake skips straight
// to kfake.
func NewKafka(t testing.TB, opts ...Option) *Kafka {
	t.Helper()
	k := newKafka(t, opts...)
	if k != nil {
		t.Logf("testkit: Kafka (%s) at %s", k.Kind, strings.Join(k.Brokers, ","))
	}
	return k
}

func newKafka(t testing.TB, opts ...Option) *Kafka {
	t.Helper()
	o := collect(opts)
	if o.forceFake {
		return newKfake(t, o)
	}
	var why reasons
	if cfg := kconf.FromEnv(); len(cfg.Brokers) > 0 {
		return &Kafka{Brokers: cfg.Brokers, Real: true, Kind: "env", Config: cfg}
	}
	why.add("KAFKA_BROKERS unset")
	if err := dockerEngine(t); err != nil {
		why.add("%v", err)
	} else if k, err := newRedpanda(t); err != nil {
		why.add("redpanda container: %v", err)
	} else {
		return k
	}
	if o.fakeOK {
		return newKfake(t, o)
	}
	why.add("fake not allowed")
	unavailable(t, "no Kafka: %s", why)
	return nil
}

func newKfake(t testing.TB, o options) *Kafka {
	t.Helper()
	kopts := append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(KfakeDefaultPartitions),
	}, o.kfakeOpts...)
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		t.Fatalf("testkit: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	return &Kafka{
		Brokers: brokers,
		Kind:    "kfake",
		Config:  kconf.Config{Brokers: brokers, ClientID: "sluice-test"},
		fake:    c,
	}
}

func newRedpanda(t testing.TB) (*Kafka, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), containerStartTimeout)
	defer cancel()
	ctr, err := redpanda.Run(ctx, RedpandaImage, testcontainers.WithLogger(newTCLogger(t)))
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		return nil, err
	}
	seed, err := ctr.KafkaSeedBroker(ctx)
	if err != nil {
		return nil, fmt.Errorf("seed broker: %w", err)
	}
	return &Kafka{
		Brokers: []string{seed},
		Real:    true,
		Kind:    "redpanda-container",
		Config:  kconf.Config{Brokers: []string{seed}, ClientID: "sluice-test"},
	}, nil
}

// Fake returns the kfake cluster for fault injection through its control
// hooks (Control, ControlKey, ...), or nil when the cluster is real.
func (k *Kafka) Fake() *kfake.Cluster { return k.fake }

// IsReal implements Service.
func (k *Kafka) IsReal() bool { return k.Real }

// String implements Service; it never includes credentials.
func (k *Kafka) String() string { return "Kafka (" + k.Kind + ")" }

// Opts returns the connection options (seed brokers, and for "env" SASL/TLS)
// without creating a client, for code under test that builds its own.
func (k *Kafka) Opts(t testing.TB) []kgo.Opt {
	t.Helper()
	opts, err := k.Config.Opts()
	if err != nil {
		t.Fatalf("testkit: Kafka client options: %v", err)
	}
	return opts
}

// Client returns a kgo client on the cluster, configured with the
// connection options followed by opts (so opts win), closed on cleanup.
func (k *Kafka) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(k.Opts(t), opts...)...)
	if err != nil {
		t.Fatalf("testkit: Kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns a kadm client on the cluster, closed on cleanup.
func (k *Kafka) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(k.Client(t))
}

// Topic creates a topic named Name(t, base) with the given partitions, the
// broker's default replication factor and the merged configs (later maps
// win), and returns its name. On real brokers the topic is deleted on
// cleanup; kfake topics go away with the cluster.
func (k *Kafka) Topic(t testing.TB, base string, partitions int32, configs ...map[string]*string) string {
	t.Helper()
	name := Name(t, base)
	var cfg map[string]*string
	if len(configs) > 0 {
		cfg = make(map[string]*string)
		for _, c := range configs {
			maps.Copy(cfg, c)
		}
	}
	adm := k.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, partitions, -1, cfg, name); err != nil {
		t.Fatalf("testkit: create topic %s (%d partitions) on %s: %v", name, partitions, k, err)
	}
	if k.Real {
		// Real brokers learn about a new topic asynchronously; a producer
		// that looks too early can fail with UNKNOWN_TOPIC_OR_PARTITION.
		if err := waitTopic(ctx, adm, name, partitions); err != nil {
			t.Fatalf("testkit: topic %s on %s: %v", name, k, err)
		}
		t.Cleanup(func() {
			ctx, cancel := cleanupContext()
			defer cancel()
			if _, err := adm.DeleteTopic(ctx, name); err != nil {
				t.Logf("testkit: delete topic %s: %v", name, err)
			}
		})
	}
	return name
}

// WaitTopic waits (up to 30 s) until the cluster's metadata lists topic
// with partitions partitions (0: any number), each with a leader: real
// brokers learn about a topic created by another client asynchronously.
func (k *Kafka) WaitTopic(t testing.TB, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitTopic(ctx, k.Admin(t), topic, partitions); err != nil {
		t.Fatalf("testkit: topic %s on %s: %v", topic, k, err)
	}
}

// waitTopic polls metadata until topic has all its partitions with leaders.
func waitTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	var last error
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil {
			last = topicReady(td[topic], partitions)
			if last == nil {
				return nil
			}
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not visible in metadata: %w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func topicReady(d kadm.TopicDetail, partitions int32) error {
	if d.Err != nil {
		return d.Err
	}
	if len(d.Partitions) == 0 || partitions > 0 && len(d.Partitions) != int(partitions) {
		return fmt.Errorf("%d of %d partitions", len(d.Partitions), partitions)
	}
	for _, p := range d.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return errors.Join(fmt.Errorf("partition %d has no leader", p.Partition), p.Err)
		}
	}
	return nil
}
