package run

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sluicehq/sluice/stages"
)

// The deletion rule of the topic watch: only consecutive, unambiguous
// "does not exist" answers (UNKNOWN_TOPIC_OR_PARTITION) for a topic seen
// before count; any answer showing the topic resets the count; the topic
// is declared deleted after topicMissChecks of them spanning at least
// (topicMissChecks-1) intervals. A new topic ID is a recreation at once.
func TestTopicWatchObserve(t *testing.T) {
	t.Parallel()
	const interval = 5 * time.Second
	id1, id2 := kadm.TopicID{1}, kadm.TopicID{2}
	type answer struct {
		at  time.Duration // since the start; 0 means one interval after the previous answer
		err error         // the topic's error code
		id  kadm.TopicID  // the topic's ID when err is nil
		// absent: the topic is missing from the answer.
		absent bool
	}
	ok := func(id kadm.TopicID) answer { return answer{id: id} }
	miss := answer{err: kerr.UnknownTopicOrPartition}
	lna := answer{err: kerr.LeaderNotAvailable}
	at := func(a answer, d time.Duration) answer { a.at = d; return a }
	for _, tc := range []struct {
		name    string
		answers []answer
		fatalAt int    // index of the answer that must return a fatal error; -1: none does
		want    string // in the fatal error
	}{
		{"healthy", []answer{ok(id1), ok(id1), ok(id1), ok(id1)}, -1, ""},
		{"two misses are not a deletion", []answer{ok(id1), miss, miss, ok(id1)}, -1, ""},
		{"miss, other error, miss", []answer{ok(id1), miss, lna, miss, miss, ok(id1)}, -1, ""},
		{"miss, healthy, miss", []answer{ok(id1), miss, miss, ok(id1), miss, miss, ok(id1)}, -1, ""},
		{"other errors only", []answer{ok(id1), lna, lna, lna, lna}, -1, ""},
		{"three consecutive misses", []answer{ok(id1), miss, miss, miss}, 3, "was deleted"},
		{"consecutive misses after a reset", []answer{ok(id1), miss, lna, miss, miss, miss}, 5, "was deleted"},
		{"an answer without the topic neither counts nor resets", []answer{ok(id1), miss, {absent: true}, miss, miss}, 4, "was deleted"},
		{"bunched misses wait for the span", []answer{
			ok(id1),
			at(miss, 5*time.Second), at(miss, 5100*time.Millisecond), at(miss, 5200*time.Millisecond), // three in 200ms
			at(miss, 14*time.Second),  // 9s after the first: still short of 10s
			at(miss, 15*time.Second)}, // 10s after the first
			5, "was deleted"},
		{"a topic never seen is waited for", []answer{miss, miss, miss, miss, ok(id1), ok(id1)}, -1, ""},
		{"a broker without topic IDs", []answer{ok(kadm.TopicID{}), miss, miss, miss, miss}, -1, ""},
		{"recreated", []answer{ok(id1), ok(id1), ok(id2)}, 2, "was deleted and recreated"},
		{"recreated after misses", []answer{ok(id1), miss, miss, ok(id2)}, 3, "was deleted and recreated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const topic = "in"
			w := newTopicWatch([]string{topic}, interval)
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var now time.Duration
			for i, a := range tc.answers {
				if a.at != 0 {
					now = a.at
				} else if i > 0 {
					now += interval
				}
				tds := kadm.TopicDetails{}
				if !a.absent {
					tds[topic] = kadm.TopicDetail{Topic: topic, ID: a.id, Err: a.err}
				}
				err := w.observe(start.Add(now), tds)
				switch {
				case i != tc.fatalAt && err != nil:
					t.Fatalf("answer %d (at %s): %v, want no error", i, now, err)
				case i == tc.fatalAt && err == nil:
					t.Fatalf("answer %d (at %s): no error, want a fatal error saying %q", i, now, tc.want)
				case i == tc.fatalAt:
					if !strings.Contains(err.Error(), "input topic "+topic) || !strings.Contains(err.Error(), tc.want) || stages.Classify(err).Kind != stages.KindFatal {
						t.Fatalf("answer %d: %v (kind %v), want a fatal error saying %q", i, err, stages.Classify(err).Kind, tc.want)
					}
					return
				}
			}
		})
	}
}

// Each topic has its own run of misses: answers showing another topic do
// not reset it.
func TestTopicWatchTopicsAreIndependent(t *testing.T) {
	t.Parallel()
	const interval = time.Second
	w := newTopicWatch([]string{"a", "b"}, interval)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	answers := []kadm.TopicDetails{
		{"a": {Topic: "a", ID: kadm.TopicID{1}}, "b": {Topic: "b", ID: kadm.TopicID{2}}},
		{"a": {Topic: "a", Err: kerr.UnknownTopicOrPartition}, "b": {Topic: "b", ID: kadm.TopicID{2}}},
		{"a": {Topic: "a", Err: kerr.UnknownTopicOrPartition}, "b": {Topic: "b", Err: kerr.LeaderNotAvailable}},
		{"a": {Topic: "a", Err: kerr.UnknownTopicOrPartition}, "b": {Topic: "b", ID: kadm.TopicID{2}}},
	}
	for i, tds := range answers {
		err := w.observe(now.Add(time.Duration(i)*interval), tds)
		if i < len(answers)-1 && err != nil {
			t.Fatalf("answer %d: %v, want no error", i, err)
		}
		if i == len(answers)-1 && (err == nil || !strings.Contains(err.Error(), "input topic a ") || stages.Classify(err).Kind != stages.KindFatal) {
			t.Fatalf("answer %d: %v, want a fatal error saying topic a was deleted", i, err)
		}
	}
}
