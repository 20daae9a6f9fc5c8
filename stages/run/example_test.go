package run_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// A pipeline is a decoder, a stage and a sink. Here the stage upper-cases
// values and dead-letters empty ones; the runner consumes "words" as a
// consumer group, writes outputs to an in-memory sink and the bad record to
// "words.dlq" with the DLQ headers.
func ExampleNew() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "words", "words.dlq"))
	defer cluster.Close()
	brokers := kgo.SeedBrokers(cluster.ListenAddrs()...)

	producer, _ := kgo.NewClient(brokers)
	defer producer.Close()
	for _, w := range []string{"alpha", "", "gamma"} {
		producer.ProduceSync(context.Background(), &kgo.Record{Topic: "words", Key: []byte("k"), Value: []byte(w)})
	}

	decode := func(_, v []byte) (string, error) { return string(v), nil }
	upper := func(_ context.Context, m stages.Msg[string]) ([]string, error) {
		if m.Value == "" {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "word.nonempty", errors.New("empty word"))
		}
		return []string{strings.ToUpper(m.Value)}, nil
	}
	sink := memsink.New[string]()
	r, err := run.New(run.Config{Name: "upper", Topics: []string{"words"}, DLQTopic: "words.dlq", BatchLinger: time.Millisecond},
		decode, upper, sink, run.WithKafkaOpts(brokers))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	for sink.Len() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	fmt.Println(<-done, sink.Items())
	// Output: <nil> [ALPHA GAMMA]
}

// counts is an upsert-style sink of per-word counts that can merge its
// outputs, so the runner can coalesce them in a window.
type counts struct {
	mu     sync.Mutex
	writes [][]wordCount
}

type wordCount struct {
	Word string
	N    int
}

func (c *counts) Write(_ context.Context, batch []wordCount) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, append([]wordCount(nil), batch...))
	return nil
}

func (c *counts) written() [][]wordCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

func (c *counts) MergeKey(w wordCount) string { return w.Word }

func (c *counts) Merge(old, next wordCount) wordCount {
	return wordCount{Word: old.Word, N: old.N + next.N}
}

// With a coalescing window the outputs of a backlog are merged per key
// before the write: six records in batches of two reach the sink as one
// write of two counts.
func ExampleWindowConfig() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "words", "words.dlq"))
	defer cluster.Close()
	brokers := kgo.SeedBrokers(cluster.ListenAddrs()...)

	producer, _ := kgo.NewClient(brokers)
	defer producer.Close()
	for _, w := range []string{"a", "b", "a", "a", "b", "a"} {
		producer.ProduceSync(context.Background(), &kgo.Record{Topic: "words", Value: []byte(w)})
	}

	decode := func(_, v []byte) (string, error) { return string(v), nil }
	count := func(_ context.Context, m stages.Msg[string]) ([]wordCount, error) {
		return []wordCount{{Word: m.Value, N: 1}}, nil
	}
	sink := &counts{}
	r, err := run.New(run.Config{Name: "count", Topics: []string{"words"}, DLQTopic: "words.dlq",
		BatchMaxRecords: 2, BatchLinger: time.Millisecond,
		Window: run.WindowConfig{MaxKeys: 1000, MaxAge: time.Minute}},
		decode, count, stages.Sink[wordCount](sink), run.WithKafkaOpts(brokers))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	for len(sink.written()) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	fmt.Println(<-done, sink.written())
	// Output: <nil> [[{a 4} {b 2}]]
}
