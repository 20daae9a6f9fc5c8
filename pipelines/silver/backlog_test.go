package silver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
)

// backlogOf returns a bronze topic holding n records that group has not
// consumed (its lag is n).
func backlogOf(t *testing.T, k *testkit.Kafka, n int) string {
	t.Helper()
	topic := k.Topic(t, "bronze", 1)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: []byte("{}")}
	}
	if err := k.Client(t).ProduceSync(testkit.Context(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return topic
}

func TestBacklogMonitorPublishesEachWayAlone(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	srv := testkit.NewPostgresServer(t)

	t.Run("a missing flags topic does not keep SCRAPE_SLOW out of control_flags", func(t *testing.T) {
		t.Parallel()
		ctx, pg := migrated(t, srv)
		topic := backlogOf(t, k, 5)
		env := pipelines.Env{Kafka: k.Opts(t), DB: pg.Pool, Registerer: prometheus.NewRegistry()}
		m, err := NewBacklogMonitor(env, BacklogConfig{Group: testkit.Name(t, "silver"), Topic: topic,
			FlagsTopic: testkit.Name(t, "no_such_flags"), Threshold: 2, Interval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		stop := testkit.RunInBackground(t, "backlog monitor", m.Run)
		testkit.WaitFor(t, 20*time.Second, "SCRAPE_SLOW=true in control_flags", func() bool {
			var n int
			err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM control_flags WHERE name = 'SCRAPE_SLOW' AND value AND updated_at >= $1",
				start.Add(-time.Second)).Scan(&n)
			return err == nil && n == 1
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if m.Ready() {
			t.Error("Ready() = true although the flag could not be published to its topic")
		}
	})

	t.Run("PostgreSQL down does not keep SCRAPE_SLOW off the flags topic", func(t *testing.T) {
		t.Parallel()
		ctx := testkit.Context(t)
		dead, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(dead.Close)
		topic := backlogOf(t, k, 5)
		flags := k.Topic(t, "flags", 1)
		env := pipelines.Env{Kafka: k.Opts(t), DB: dead, Registerer: prometheus.NewRegistry()}
		m, err := NewBacklogMonitor(env, BacklogConfig{Group: testkit.Name(t, "silver"), Topic: topic,
			FlagsTopic: flags, Threshold: 2, Interval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop := testkit.RunInBackground(t, "backlog monitor", m.Run)
		cl := k.Client(t, kgo.ConsumeTopics(flags), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		var got *kgo.Record
		for got == nil {
			fs := cl.PollFetches(fctx)
			if err := fctx.Err(); err != nil {
				t.Fatal("no SCRAPE_SLOW record on the flags topic")
			}
			fs.EachRecord(func(r *kgo.Record) { got = r })
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		var v FlagValue
		if err := json.Unmarshal(got.Value, &v); err != nil {
			t.Fatal(err)
		}
		if string(got.Key) != FlagScrapeSlow || !v.Value || v.Lag != 5 || !strings.Contains(string(got.Value), `"updated_at"`) {
			t.Errorf("flag record %s = %s", got.Key, got.Value)
		}
	})
}

// With several processes publishing, a write that arrives late (measured
// earlier, delayed on its way) must not replace a newer flag in
// control_flags; the topic keeps every value anyway.
func TestBacklogMonitorKeepsNewerFlagInPostgres(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	srv := testkit.NewPostgresServer(t)
	ctx, pg := migrated(t, srv)
	env := pipelines.Env{Kafka: k.Opts(t), DB: pg.Pool, Registerer: prometheus.NewRegistry()}
	flags := k.Topic(t, "flags", 1)
	m, err := NewBacklogMonitor(env, BacklogConfig{Group: testkit.Name(t, "silver"), Topic: backlogOf(t, k, 1), FlagsTopic: flags})
	if err != nil {
		t.Fatal(err)
	}
	cl := k.Client(t)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	steps := []struct {
		v         FlagValue
		wantValue bool
		wantAt    time.Time
	}{
		{FlagValue{Value: true, Lag: 20000, UpdatedAt: t0}, true, t0},
		{FlagValue{Value: false, Lag: 3, UpdatedAt: t0.Add(-time.Minute)}, true, t0}, // late: ignored
		{FlagValue{Value: false, Lag: 3, UpdatedAt: t0}, false, t0},                  // same time: taken
		{FlagValue{Value: true, Lag: 30000, UpdatedAt: t0.Add(time.Second)}, true, t0.Add(time.Second)},
	}
	for i, s := range steps {
		if err := m.Publish(ctx, cl, s.v); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		var v bool
		var at time.Time
		if err := pg.Pool.QueryRow(ctx, "SELECT value, updated_at FROM control_flags WHERE name = 'SCRAPE_SLOW'").Scan(&v, &at); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if v != s.wantValue || !at.Equal(s.wantAt) {
			t.Errorf("step %d: control_flags = %v at %s, want %v at %s", i, v, at.UTC(), s.wantValue, s.wantAt)
		}
	}
}
