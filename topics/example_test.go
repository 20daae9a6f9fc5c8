package topics_test

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/topics"
)

func ExampleEnsure() {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()

	// The ticks topics, with more partitions for the co-partitioned pair.
	var ticks []topics.Spec
	for _, s := range topics.Catalog() {
		switch s.Name {
		case topics.IngestTasks, topics.IngestJobs, topics.IngestDLQ:
			ticks = append(ticks, s)
		}
	}
	specs, err := topics.Select(ticks, topics.WithPartitions(topics.IngestTasks, 6))
	if err != nil {
		panic(err)
	}

	for round := 1; round <= 2; round++ {
		changes, err := topics.Ensure(ctx, adm, specs)
		if err != nil {
			panic(err)
		}
		for _, ch := range changes {
			fmt.Printf("%d %-12s %-7s %s\n", round, ch.Topic, ch.Action, ch.Detail)
		}
	}
	// Output:
	// 1 ingest.tasks created partitions=6, cleanup.policy=delete, retention.ms=604800000
	// 1 ingest.jobs  created partitions=6, cleanup.policy=compact, delete.retention.ms=86400000, min.cleanable.dirty.ratio=0.1, segment.ms=3600000
	// 1 ingest.dlq   created partitions=3, cleanup.policy=delete, retention.ms=1209600000
	// 2 ingest.tasks ok      partitions=6, cleanup.policy=delete
	// 2 ingest.jobs  ok      partitions=6, cleanup.policy=compact
	// 2 ingest.dlq   ok      partitions=3, cleanup.policy=delete
}
