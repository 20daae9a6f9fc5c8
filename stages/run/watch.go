package run

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// watchTopics checks the input topics' metadata at once and then every
// interval until ctx is done (it then returns nil). It returns a fatal
// error when a topic it has seen gets a new topic ID (it was deleted and
// recreated) or is missing on two checks in a row (it was deleted). A topic
// not created yet is waited for, as kgo does.
//
// A deleted or recreated input topic stops the runner because kgo cannot
// follow it: a client pins a topic to the ID it first loaded and never
// consumes a new instance of it; depending on when it notices, it either
// answers UNKNOWN_TOPIC_ID poll after poll or idles without a word, for
// ever. Following the new instance in place (PurgeTopicsFromClient, then
// AddConsumeTopics) is what kgo's README advises against: every member of
// the group would have to do it, and a broker older than Kafka 4.2 may
// apply the old instance's commits to the new one. A restarted runner (a
// new client) consumes the new instance from the group's commits for it;
// Kafka drops a topic's commits when it is deleted, so it starts at
// Config.StartOffset.
//
// A recreation between the runner's start and the first check is not
// seen. Metadata errors are ignored: the next check tries again.
func watchTopics(ctx context.Context, kopts []kgo.Opt, topics []string, interval time.Duration) error {
	// kgo answers a metadata request from its cache while the cache is
	// younger than MetadataMinAge (5s by default).
	cl, err := kgo.NewClient(append(slices.Clone(kopts), kgo.MetadataMinAge(interval/2))...)
	if err != nil {
		return fmt.Errorf("topic watch: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ids := map[string]kadm.TopicID{}
	missing := map[string]int{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := checkTopics(ctx, adm, topics, ids, missing); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// checkTopics is one check of watchTopics: ids holds the ID first seen of
// each topic, missing the checks in a row that did not find a topic seen
// before.
func checkTopics(ctx context.Context, adm *kadm.Client, topics []string, ids map[string]kadm.TopicID, missing map[string]int) error {
	ctx, cancel := context.WithTimeout(ctx, topicCheckTimeout)
	defer cancel()
	tds, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil
	}
	for _, topic := range topics {
		td, listed := tds[topic]
		old, seen := ids[topic]
		switch {
		case listed && td.Err == nil:
			missing[topic] = 0
			switch {
			case td.ID == kadm.TopicID{}: // a broker without topic IDs
			case !seen:
				ids[topic] = td.ID
			case td.ID != old:
				return stages.Fatal(fmt.Errorf("input topic %s was deleted and recreated (topic ID %s, consumed %s): "+
					"the Kafka client never consumes a new instance of a topic; restart the runner to consume it", topic, td.ID, old))
			}
		case seen && (!listed || errors.Is(td.Err, kerr.UnknownTopicOrPartition)):
			if missing[topic]++; missing[topic] >= 2 {
				return stages.Fatal(fmt.Errorf("input topic %s (topic ID %s) was deleted", topic, old))
			}
		}
	}
	return nil
}

const (
	// topicCheckInterval is the period of watchTopics.
	topicCheckInterval = 5 * time.Second
	// topicCheckTimeout bounds one metadata lookup of watchTopics.
	topicCheckTimeout = 10 * time.Second
)
