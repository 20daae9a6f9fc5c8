package trades_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/stages/run"
)

// importFixture is a trades-import service on isolated topics, group and
// Postgres schema.
type importFixture struct {
	k    *testkit.Kafka
	pg   *testkit.Postgres
	cfg  trades.ImportConfig
	reg  *prometheus.Registry
	prod *kgo.Client
	logs *testkit.Buffer // every log line of the service, DEBUG included
}

// newImportFixture provisions Kafka (kfake, or the real cluster with
// real), a migrated schema and the service's topics; mod adjusts the
// config (adapters, retry policy …).
func newImportFixture(t *testing.T, real bool, mod func(*trades.ImportConfig)) *importFixture {
	t.Helper()
	f := &importFixture{reg: prometheus.NewRegistry(), logs: &testkit.Buffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service log:\n%s", f.logs)
		}
	})
	if real {
		f.k = testkit.NewKafka(t)
	} else {
		f.k = testkit.NewKafka(t, testkit.ForceFake())
	}
	f.pg = testkit.NewPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := schemas.Migrate(ctx, f.pg.URL); err != nil {
		t.Fatal(err)
	}
	compact := map[string]*string{"cleanup.policy": ptr("compact")}
	f.cfg = trades.ImportConfig{
		Group:       testkit.Name(t, "trades-import"),
		ImportTopic: f.k.Topic(t, "trades.import", 3),
		StateTopic:  f.k.Topic(t, "trades.import.state", 3, compact),
		EventsTopic: f.k.Topic(t, "trades.events", 3),
		DLQTopic:    f.k.Topic(t, "trades.dlq", 3),
		Retry:       run.RetryPolicy{MaxAttempts: 6, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		DBRetryWait: 20 * time.Millisecond,
		Runtime:     run.Config{BatchLinger: 5 * time.Millisecond, CommitInterval: 100 * time.Millisecond, RevokeTimeout: 10 * time.Second},
	}
	if mod != nil {
		mod(&f.cfg)
	}
	f.prod = f.k.Client(t)
	t.Logf("using %s, %s", f.k, f.pg)
	return f
}

func ptr[T any](v T) *T { return &v }

// start runs the service and waits until it is ready; stop stops it.
func (f *importFixture) start(t *testing.T) (stop func()) {
	t.Helper()
	env := pipelines.Env{
		Kafka:      append(f.k.Opts(t), kgo.FetchMaxWait(100*time.Millisecond)),
		DB:         f.pg.Pool,
		Registerer: f.reg,
		Logger:     slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	svcs, err := trades.ImportServices(env, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 1 || svcs[0].Name() != trades.ImportName {
		t.Fatalf("services %v, want one named %s", svcs, trades.ImportName)
	}
	s := svcs[0]
	halt := testkit.RunInBackground(t, s.Name(), s.Run)
	testkit.WaitFor(t, 30*time.Second, "trades-import ready", s.Ready)
	return func() {
		if err := halt(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
}

// send produces commands (JSON-encoded unless []byte) keyed by key, in one
// batch and in order.
func (f *importFixture) send(t *testing.T, key string, vs ...any) {
	t.Helper()
	var recs []*kgo.Record
	for _, v := range vs {
		b, ok := v.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		recs = append(recs, &kgo.Record{Topic: f.cfg.ImportTopic, Key: []byte(key), Value: b})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// event is a decoded trades.events record.
type event struct {
	Key     string
	EventID string          `json:"event_id"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

func (f *importFixture) events(t *testing.T) []event {
	t.Helper()
	var out []event
	for _, r := range f.k.ReadTopic(t, f.cfg.EventsTopic) {
		var e event
		if err := json.Unmarshal(r.Value, &e); err != nil {
			t.Fatalf("event %s: %v", r.Value, err)
		}
		e.Key = string(r.Key)
		out = append(out, e)
	}
	return out
}

// ofType returns the payloads of the events of type typ, decoded as P.
func ofType[P any](t *testing.T, evs []event, typ string) []P {
	t.Helper()
	var out []P
	for _, e := range evs {
		if e.Type == typ {
			var p P
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
	}
	return out
}

// waitEvents waits until n events of type typ are on the events topic.
func (f *importFixture) waitEvents(t *testing.T, typ string, n int) []event {
	t.Helper()
	var evs []event
	testkit.WaitFor(t, 60*time.Second, typ+" events", func() bool {
		evs = f.events(t)
		c := 0
		for _, e := range evs {
			if e.Type == typ {
				c++
			}
		}
		return c >= n
	})
	return evs
}

// waitDLQ waits until n dead letters are on the DLQ topic.
func (f *importFixture) waitDLQ(t *testing.T, n int) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	testkit.WaitFor(t, 60*time.Second, "dead letters", func() bool {
		recs = f.k.ReadTopic(t, f.cfg.DLQTopic, testkit.ReadCommitted())
		return len(recs) >= n
	})
	return recs
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (f *importFixture) state(t *testing.T, importID string) trades.ImportState {
	t.Helper()
	// The runtime writes a batch's state after its outputs: a test that
	// saw an event may read the state a moment before it lands. Read until
	// two reads 200 ms apart agree.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var prev *trades.ImportState
	for {
		all, err := trades.ReadImports(ctx, f.k.Opts(t), f.cfg.StateTopic)
		if err != nil {
			t.Fatal(err)
		}
		st, ok := all[importID]
		if ok && prev != nil && reflect.DeepEqual(*prev, st) {
			return st
		}
		if ok {
			prev = &st
		}
		select {
		case <-ctx.Done():
			if prev == nil {
				t.Fatalf("no state for import %s", importID)
			}
			return *prev
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rowCount counts the trades rows of user.
func (f *importFixture) rowCount(t *testing.T, user string) int {
	t.Helper()
	var n int
	if err := f.pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM trades WHERE user_id = $1`, user).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *importFixture) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return testkit.Metric(t, f.reg, name, labels...)
}

// importCmd is an import command of user from since at broker.
func importCmd(user, since, broker string, force bool, opts *trades.SyntheticOptions) trades.ImportCommand {
	return trades.ImportCommand{UserID: user, Since: since, Broker: broker, Force: force, Options: opts}
}
