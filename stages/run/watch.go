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
// recreated) or when it is deleted: see topicWatch.observe for the rule,
// which needs topicMissChecks answers in a row saying the topic does not
// exist, spanning at least (topicMissChecks-1)×interval (3 answers over at
// least 10s at the default 5s interval). A topic not created yet is waited
// for, as kgo does.
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
// seen. A failed metadata request is no answer: it neither counts as a
// miss nor resets the count, and the next check tries again.
func watchTopics(ctx context.Context, kopts []kgo.Opt, topics []string, interval time.Duration) error {
	// kgo answers a metadata request from its cache while the cache is
	// younger than MetadataMinAge (5s by default).
	cl, err := kgo.NewClient(append(slices.Clone(kopts), kgo.MetadataMinAge(interval/2))...)
	if err != nil {
		return fmt.Errorf("topic watch: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	w := newTopicWatch(topics, interval)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := checkTopics(ctx, adm, w); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// checkTopics is one check of watchTopics: one metadata request for w's
// topics, its answer given to w.observe.
func checkTopics(ctx context.Context, adm *kadm.Client, w *topicWatch) error {
	ctx, cancel := context.WithTimeout(ctx, topicCheckTimeout)
	defer cancel()
	tds, err := adm.ListTopics(ctx, w.topics...)
	if err != nil {
		return nil // no answer (kadm also fails when a requested topic is missing from the response)
	}
	return w.observe(time.Now(), tds)
}

// topicWatch is the state of watchTopics between checks. It is used by one
// goroutine.
type topicWatch struct {
	topics []string
	// minSpan is how long the misses counted for a topic must span before
	// it is declared deleted: (topicMissChecks-1) check intervals.
	minSpan time.Duration
	ids     map[string]kadm.TopicID // the ID first seen of each topic
	misses  map[string]missRun      // the current run of misses of a topic seen before
}

// missRun is a run of consecutive answers saying a topic does not exist.
type missRun struct {
	n     int       // answers in the run
	first time.Time // when the first of them came
}

func newTopicWatch(topics []string, interval time.Duration) *topicWatch {
	return &topicWatch{
		topics:  topics,
		minSpan: time.Duration(topicMissChecks-1) * interval,
		ids:     map[string]kadm.TopicID{},
		misses:  map[string]missRun{},
	}
}

// observe takes one metadata answer, received at now, and returns a fatal
// error when it shows an input topic deleted or recreated, nil otherwise.
// Per topic:
//
//   - Listed without error: the topic exists. The run of misses is reset;
//     the first topic ID seen is remembered, and a different ID later
//     means the topic was deleted and recreated (fatal). A broker without
//     topic IDs (a zero ID) is never compared.
//   - Listed with UNKNOWN_TOPIC_OR_PARTITION: a miss, the one unambiguous
//     "does not exist" answer. It counts only for a topic seen before
//     (listed once with a topic ID; one never seen is waited for). The topic is declared deleted (fatal)
//     when topicMissChecks misses in a row came, the last at least minSpan
//     after the first: one or two such answers also come from a broker
//     that restarts or has not loaded its metadata yet, and checks can
//     bunch up after a slow request.
//   - Listed with any other error (LEADER_NOT_AVAILABLE, for one): the
//     broker knows the topic, so it exists; the run of misses is reset.
//   - Not listed: no answer about the topic; the run is left as it is.
func (w *topicWatch) observe(now time.Time, tds kadm.TopicDetails) error {
	for _, topic := range w.topics {
		td, listed := tds[topic]
		if !listed {
			continue
		}
		old, seen := w.ids[topic]
		if errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
			if !seen {
				continue
			}
			m := w.misses[topic]
			if m.n == 0 {
				m.first = now
			}
			m.n++
			w.misses[topic] = m
			if span := now.Sub(m.first); m.n >= topicMissChecks && span >= w.minSpan {
				return stages.Fatal(fmt.Errorf("input topic %s (topic ID %s) was deleted: %d metadata answers in a row over %s said it does not exist",
					topic, old, m.n, span.Round(time.Millisecond)))
			}
			continue
		}
		delete(w.misses, topic) // listed without UNKNOWN_TOPIC_OR_PARTITION: the topic exists
		switch {
		case td.Err != nil: // LEADER_NOT_AVAILABLE, say: no topic ID to compare
		case td.ID == kadm.TopicID{}: // a broker without topic IDs
		case !seen:
			w.ids[topic] = td.ID
		case td.ID != old:
			return stages.Fatal(fmt.Errorf("input topic %s was deleted and recreated (topic ID %s, consumed %s): "+
				"the Kafka client never consumes a new instance of a topic; restart the runner to consume it", topic, td.ID, old))
		}
	}
	return nil
}

const (
	// topicCheckInterval is the period of watchTopics.
	topicCheckInterval = 5 * time.Second
	// topicCheckTimeout bounds one metadata lookup of watchTopics.
	topicCheckTimeout = 10 * time.Second
	// topicMissChecks is how many answers in a row must say that a topic
	// seen before does not exist before watchTopics declares it deleted
	// (see topicWatch.observe).
	topicMissChecks = 3
)
