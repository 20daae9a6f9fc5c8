package topics_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// cluster returns a kgo client and an admin client against KAFKA_BROKERS when
// set, otherwise against a fresh in-process kfake cluster, plus a topic
// prefix unique to the test.
func cluster(t *testing.T) (*kgo.Client, *kadm.Client, string) {
	t.Helper()
	brokers := os.Getenv("KAFKA_BROKERS")
	if brokers == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatalf("kfake: %v", err)
		}
		t.Cleanup(c.Close)
		brokers = strings.Join(c.ListenAddrs(), ",")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	p := prefix(t)
	if os.Getenv("KAFKA_BROKERS") != "" {
		// A shared broker keeps topics: delete this test's ones.
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx))
			if err != nil {
				t.Logf("cleanup: list topics: %v", err)
				return
			}
			var mine []string
			for _, n := range d.Names() {
				if strings.HasPrefix(n, p) {
					mine = append(mine, n)
				}
			}
			if len(mine) > 0 {
				if _, err := adm.DeleteTopics(ctx, mine...); err != nil {
					t.Logf("cleanup: delete topics: %v", err)
				}
			}
		})
	}
	return cl, adm, p
}

var (
	seq       atomic.Int64
	nonTopics = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)
)

func prefix(t *testing.T) string {
	return fmt.Sprintf("t%x-%d-%s.", time.Now().UnixNano(), seq.Add(1), nonTopics.ReplaceAllString(t.Name(), "_"))
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// topicConfig reads one config of topic back from the cluster.
func topicConfig(t *testing.T, adm *kadm.Client, topic, key string) string {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(testContext(t), topic)
	if err != nil {
		t.Fatalf("describe configs of %s: %v", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe configs of %s: %v %v", topic, err, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == key {
			return c.MaybeValue()
		}
	}
	return ""
}

func partitionCount(t *testing.T, adm *kadm.Client, topic string) int {
	t.Helper()
	d, err := adm.ListTopics(kadm.WithAuthorizedOps(testContext(t)), topic)
	if err != nil {
		t.Fatalf("list %s: %v", topic, err)
	}
	if d[topic].Err != nil {
		t.Fatalf("list %s: %v", topic, d[topic].Err)
	}
	return len(d[topic].Partitions)
}
