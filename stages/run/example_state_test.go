package run_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// A stage keeps a running count per key in a state store backed by the
// compacted changelog "words.counts" (co-partitioned with "words"). The
// runner restores the store when it is assigned a partition, and produces
// the batch's changed counts after the sink's write and before the
// batch's offsets commit; Store.Read reads the changelog back.
func ExampleStore() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "words", "words.dlq", "words.counts"))
	defer cluster.Close()
	brokers := kgo.SeedBrokers(cluster.ListenAddrs()...)
	producer, _ := kgo.NewClient(brokers)
	defer producer.Close()
	for _, w := range []string{"a", "b", "a"} {
		producer.ProduceSync(context.Background(), &kgo.Record{Topic: "words", Key: []byte(w), Value: []byte(w)})
	}

	counts, _ := run.NewStore(run.StoreConfig[int]{
		Name: "counts", Topic: "words.counts",
		Encode: func(n int) ([]byte, error) { return []byte(strconv.Itoa(n)), nil },
		Decode: func(b []byte) (int, error) { return strconv.Atoi(string(b)) },
	})
	decode := func(_, v []byte) (string, error) { return string(v), nil }
	count := func(ctx context.Context, m stages.Msg[string]) ([]string, error) {
		st, err := counts.Of(ctx) // this record's partition of the store
		if err != nil {
			return nil, err
		}
		n, _ := st.Get(m.Key)
		if err := st.Put(m.Key, n+1); err != nil {
			return nil, err
		}
		return []string{fmt.Sprintf("%s=%d", m.Key, n+1)}, nil
	}
	sink := memsink.New[string]()
	r, _ := run.New(run.Config{Name: "count", Topics: []string{"words"}, DLQTopic: "words.dlq", BatchLinger: time.Millisecond},
		decode, count, sink, run.WithKafkaOpts(brokers), run.WithStores(counts))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	for sink.Len() < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	fmt.Println(<-done, sink.Items())
	state, _ := counts.Read(context.Background(), []kgo.Opt{brokers}, nil)
	fmt.Println(state)
	// Output:
	// <nil> [a=1 b=1 a=2]
	// map[0:map[a:2 b:1]]
}

// A keyed timer closes a session: the stage collects a key's items in its
// entry and sets the entry's timer when the "end" item comes; the timer
// function, called on the partition's worker between batches, outputs the
// session and deletes the entry. The timer is stored with the entry in the
// changelog, so a session whose timer had not fired when its partition
// moved fires on the next owner; the delete, committed with the firing's
// output, keeps a firing from being repeated once it is durable.
func ExampleWithTimers() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "items", "items.dlq", "items.sessions"))
	defer cluster.Close()
	brokers := kgo.SeedBrokers(cluster.ListenAddrs()...)
	producer, _ := kgo.NewClient(brokers)
	defer producer.Close()
	for _, kv := range [][2]string{{"u1", "x"}, {"u2", "y"}, {"u1", "z"}, {"u1", "end"}, {"u2", "end"}} {
		producer.ProduceSync(context.Background(), &kgo.Record{Topic: "items", Key: []byte(kv[0]), Value: []byte(kv[1])})
	}

	sessions, _ := run.NewStore(run.StoreConfig[string]{
		Name: "sessions", Topic: "items.sessions",
		Encode: func(s string) ([]byte, error) { return []byte(s), nil },
		Decode: func(b []byte) (string, error) { return string(b), nil },
	})
	decode := func(_, v []byte) (string, error) { return string(v), nil }
	collect := func(ctx context.Context, m stages.Msg[string]) ([]string, error) {
		st, err := sessions.Of(ctx)
		if err != nil {
			return nil, err
		}
		if m.Value == "end" {
			return nil, st.SetTimer(m.Key, time.Now()) // due at once
		}
		items, _ := st.Get(m.Key)
		return nil, st.Put(m.Key, strings.TrimPrefix(items+","+m.Value, ","))
	}
	closeSession := func(ctx context.Context, f run.Firing) ([]string, error) {
		st, err := sessions.Of(ctx)
		if err != nil {
			return nil, err
		}
		items, _ := st.Get(f.Key)
		return []string{f.Key + ":" + items}, st.Delete(f.Key)
	}
	sink := memsink.New[string]()
	r, _ := run.New(run.Config{Name: "sessions", Topics: []string{"items"}, DLQTopic: "items.dlq", BatchLinger: time.Millisecond},
		decode, collect, sink, run.WithKafkaOpts(brokers), run.WithStores(sessions), run.WithTimers(0, closeSession))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	for sink.Len() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	fmt.Println(<-done, sink.Items())
	// Output: <nil> [u1:x,z u2:y]
}
