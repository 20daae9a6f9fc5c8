package dlq_test

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages/dlq"
)

func ExampleParse() {
	rec := &kgo.Record{
		Topic: "bronze.dlq", Partition: 0, Offset: 12,
		Key:   []byte("FPT"),
		Value: []byte(`{"task_type":"ta.bar","payload":{"symbol":"fpt"}}`),
		Headers: []kgo.RecordHeader{
			{Key: "dlq.reason", Value: []byte("sanity_fail")},
			{Key: "dlq.rule", Value: []byte("ta.symbol")},
			{Key: "dlq.source.topic", Value: []byte("bronze.records")},
			{Key: "dlq.source.partition", Value: []byte("3")},
			{Key: "dlq.source.offset", Value: []byte("1042")},
			{Key: "dlq.failed_at", Value: []byte("2024-05-01T09:00:00Z")},
		},
	}
	r, err := dlq.Parse(rec)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %s from %s[%d]@%d, re-driven %d times\n", r.Reason, r.Rule, r.SourceTopic, r.SourcePartition, r.SourceOffset, r.RedriveCount)

	f := dlq.Filter{Reasons: []string{"sanity_fail"}, Since: time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)}
	fmt.Println("matches:", f.Match(r))
	f.Rules = []string{"ta.price"}
	fmt.Println("matches ta.price:", f.Match(r))
	// Output:
	// sanity_fail ta.symbol from bronze.records[3]@1042, re-driven 0 times
	// matches: true
	// matches ta.price: false
}
