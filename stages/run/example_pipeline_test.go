package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// The example pipeline of docs/architecture.md (the block between the
// example:begin and example:end markers is the document's listing;
// TestArchitectureDocListsTheExample keeps the two equal).
//
// example:begin
//
// An order is {"qty": N}, keyed by its customer. The pipeline keeps each
// customer's running total in a state store (changelog "orders.totals",
// co-partitioned with "orders"), emits "customer=total" per order, and
// dead-letters orders whose qty is not positive to "orders.dlq".
type order struct {
	Qty int `json:"qty"`
}

func Example_pipeline() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders", "orders.dlq", "orders.totals"))
	defer cluster.Close()
	brokers := kgo.SeedBrokers(cluster.ListenAddrs()...)

	// 1. State: one int per customer, restored on assignment.
	totals, _ := run.NewStore(run.StoreConfig[int]{
		Name: "totals", Topic: "orders.totals",
		Encode: func(n int) ([]byte, error) { return strconv.AppendInt(nil, int64(n), 10), nil },
		Decode: func(b []byte) (int, error) { return strconv.Atoi(string(b)) },
	})
	// 2. Decoder: a decode error dead-letters the record as decode_error.
	decode := func(_, v []byte) (order, error) {
		var o order
		err := json.Unmarshal(v, &o)
		return o, err
	}
	// 3. Stage: business rules and state; the runtime owns retries,
	// dead letters, offsets and the changelog writes.
	add := func(ctx context.Context, m stages.Msg[order]) ([]string, error) {
		if m.Value.Qty <= 0 {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "orders.qty", errors.New("qty must be positive"))
		}
		st, err := totals.Of(ctx)
		if err != nil {
			return nil, err
		}
		n, _ := st.Get(m.Key)
		if err := st.Put(m.Key, n+m.Value.Qty); err != nil {
			return nil, err
		}
		return []string{fmt.Sprintf("%s=%d", m.Key, n+m.Value.Qty)}, nil
	}
	// 4. Sink: an in-memory one here; pgsink, kafkasink or objstore in a
	// real pipeline.
	sink := memsink.New[string]()
	r, err := run.New(run.Config{Name: "orders", Topics: []string{"orders"}, DLQTopic: "orders.dlq", BatchLinger: time.Millisecond},
		decode, add, sink, run.WithKafkaOpts(brokers), run.WithStores(totals))
	if err != nil {
		fmt.Println(err)
		return
	}

	producer, _ := kgo.NewClient(brokers, kgo.DefaultProduceTopic("orders"))
	defer producer.Close()
	for _, v := range []string{`{"qty":2}`, `{"qty":0}`, `{"qty":3}`, `not json`} {
		producer.ProduceSync(context.Background(), &kgo.Record{Key: []byte("c1"), Value: []byte(v)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	dlq, _ := kgo.NewClient(brokers, kgo.ConsumeTopics("orders.dlq"))
	defer dlq.Close()
	for n := 0; n < 2; {
		dlq.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
			n++
			for _, h := range rec.Headers {
				if h.Key == stages.HeaderReason {
					fmt.Printf("dead letter %q: %s\n", rec.Value, h.Value)
				}
			}
		})
	}
	for sink.Len() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	fmt.Println(<-done, sink.Items())
	// Output:
	// dead letter "{\"qty\":0}": sanity_fail
	// dead letter "not json": decode_error
	// <nil> [c1=2 c1=5]
}

// example:end
