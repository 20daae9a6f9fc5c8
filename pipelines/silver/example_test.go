package silver_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/stages"
)

// Decoding and validating two bronze records with a fixed clock.
func ExampleStage() {
	now := func() time.Time { return time.Date(2025, 6, 2, 3, 0, 0, 0, time.UTC) }
	stage := silver.Stage(silver.WithClock(now))
	for _, value := range []string{
		`{"task_type":"ta.bar","payload":{"symbol":"VNM","trade_date":"2025-05-30","open":61000,"high":61500,"low":60800,"close":61200,"volume":1.2e6}}`,
		`{"task_type":"ta.bar","payload":{"symbol":"VNM","trade_date":"2025-05-30","open":61000,"high":60900,"low":60800,"close":61200,"volume":100}}`,
	} {
		env, err := silver.Decode([]byte("VNM"), []byte(value))
		if err != nil {
			fmt.Println(err)
			continue
		}
		rows, err := stage(context.Background(), stages.Msg[silver.Envelope]{Key: "VNM", Value: env})
		if err != nil {
			c := stages.Classify(err)
			fmt.Printf("dead-letter reason=%s rule=%s\n", c.Reason, c.Rule)
			continue
		}
		r := rows[0].TA
		fmt.Printf("%s %s close=%v volume=%d currency=%s\n", r.Symbol, r.TradeDate.Format(time.DateOnly), r.Close, r.Volume, r.Currency)
	}
	// Output:
	// VNM 2025-05-30 close=61200 volume=1200000 currency=VND
	// dead-letter reason=sanity_fail rule=ta.price_relation
}

// The corpus generator labels every record with the verdict the stage must
// reach.
func ExampleGenerateCorpus() {
	for _, r := range silver.GenerateCorpus(1, 5, 0.5) {
		verdict := "valid"
		if r.WantReason != "" {
			verdict = string(r.WantReason) + " " + r.WantRule
		}
		fmt.Printf("%-40.40s %s\n", r.Key, verdict)
	}
}
