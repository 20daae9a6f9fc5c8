package modules

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
)

// Every record the running modules services write matches its schema in
// schemas/json: the requests (a job's request as RefreshRequest encodes
// it, and the normalised copy of a re-keyed one) and every state the
// refresher writes (refreshing with its lease, ready with data_date and
// analysis, error after a failing upstream).
func TestRecordsMatchSchemas(t *testing.T) {
	t.Parallel()
	set, err := schemas.Compile()
	if err != nil {
		t.Fatal(err)
	}
	faults, err := ParseFaults("FAILX=transient")
	if err != nil {
		t.Fatal(err)
	}
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, func(c *Config) {
		c.Source = newCountingSource(NewSynthetic(SyntheticConfig{Faults: faults}))
	})
	job, err := json.Marshal(RefreshRequest{Ticker: "NVDA", Module: ModuleShortInterest, Reason: ReasonAssemble,
		JobID: "0b6f5a4e-6a0e-4b52-9a47-0d1a4a2a7f11", RequestedAt: time.Now().UTC(), RequestID: "r-job"})
	if err != nil {
		t.Fatal(err)
	}
	f.produce(t,
		&kgo.Record{Key: []byte("NVDA:short_interest"), Value: job},
		&kgo.Record{Key: []byte("nvda:options_flow"), Value: request("nvda", ModuleOptionsFlow)},
		&kgo.Record{Key: []byte("FAILX:dark_pool"), Value: request("FAILX", ModuleDarkPool)},
	)
	f.start(t)
	f.waitRequests(t, 4) // 3, and the re-keyed copy
	testkit.WaitFor(t, 60*time.Second, "states written", func() bool {
		st := f.states(t)
		return st["NVDA:short_interest"].Status == StatusReady && st["NVDA:options_flow"].Status == StatusReady &&
			st["FAILX:dark_pool"].Status == StatusError
	})

	seen := map[string]int{}
	for topic, schema := range map[string]string{f.cfg.RefreshTopic: schemas.ModulesRefresh, f.cfg.StateTopic: schemas.ModulesState} {
		for _, r := range f.k.ReadTopic(t, topic) {
			if r.Value == nil {
				continue
			}
			if err := set.Validate(schema, r.Value); err != nil {
				t.Errorf("%s record (key %s): %v\n%s", topic, r.Key, err, r.Value)
			}
			var probe struct {
				Status   string          `json:"status"`
				Ticker   string          `json:"ticker"`
				DataDate *string         `json:"data_date"`
				Analysis json.RawMessage `json:"analysis"`
			}
			if err := json.Unmarshal(r.Value, &probe); err != nil {
				t.Fatal(err)
			}
			switch {
			case schema == schemas.ModulesRefresh && string(r.Key) == "NVDA:options_flow" && probe.Ticker == "NVDA":
				seen["re-keyed request"]++
			case schema == schemas.ModulesRefresh:
				seen["request"]++
			case probe.Status == string(StatusReady) && probe.DataDate != nil && string(probe.Analysis) != "null":
				seen["ready with data_date and analysis"]++
			default:
				seen[probe.Status]++
			}
		}
	}
	t.Logf("records checked: %v", seen)
	for _, k := range []string{"request", "re-keyed request", "refreshing", "ready", "ready with data_date and analysis", "error"} {
		if seen[k] == 0 {
			t.Errorf("no %s record was checked (seen %v)", k, seen)
		}
	}
}
