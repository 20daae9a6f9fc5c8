package trades_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/registry"
	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/stages/run"
	"github.com/sluicehq/sluice/topics"
)

// The declaration names the groups, inputs, states, outputs and DLQ of
// trades-import, trades-score and trades-digest, and needs Postgres and
// the object store.
func TestDeclare(t *testing.T) {
	t.Parallel()
	s := trades.Declare(trades.Config{})
	if s.Name != "trades" || !s.Needs.DB || !s.Needs.Objects || len(s.Consumers) != 3 {
		t.Fatalf("spec %+v", s)
	}
	for i, want := range [][2]string{
		{trades.ImportName, topics.TradesImport}, {trades.ScoreName, topics.TradesEvents}, {trades.DigestName, topics.TradesBias},
	} {
		if c := s.Consumers[i]; c.Group != want[0] || c.Input != want[1] || c.DLQ != topics.TradesDLQ {
			t.Fatalf("consumer %d %+v, want %v", i, c, want)
		}
	}
	if !slices.Equal(s.Stores, []string{topics.TradesImportState, topics.TradesDigestState}) ||
		!slices.Equal(s.Outputs, []string{topics.CoachReflect, topics.DigestReady}) {
		t.Fatalf("stores %v outputs %v", s.Stores, s.Outputs)
	}
}

// sluice run trades: the registry's declaration, built under a run's
// prefixes, runs trades-import on the prefixed topics and group and
// mounts the imports API on the ops server; trades-score scores the
// completed import.
func TestRunFromRegistry(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	pg := testkit.NewPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	all := registry.All(registry.Settings{Trades: trades.Config{Import: trades.ImportConfig{
		Runtime: run.Config{BatchLinger: 5 * time.Millisecond, CommitInterval: 100 * time.Millisecond},
	}}})
	i := slices.IndexFunc(all, func(s pipelines.Spec) bool { return s.Name == trades.Name })
	if i < 0 {
		t.Fatal("the registry has no trades pipeline")
	}
	prefix := testkit.Name(t, "p") + "."
	naming := pipelines.Naming{GroupPrefix: prefix, TopicPrefix: prefix}
	adm := kadm.NewClient(k.Client(t))
	for _, tp := range all[i].Topics() {
		cfgs := map[string]*string{}
		if tp == topics.TradesImportState || tp == topics.TradesDigestState {
			cfgs["cleanup.policy"] = ptr("compact")
		}
		if _, err := adm.CreateTopic(ctx, 3, 1, cfgs, naming.Topic(tp)); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(&testkit.Buffer{}, nil))
	env := pipelines.Env{Kafka: append(k.Opts(t), kgo.FetchMaxWait(100*time.Millisecond)), DB: pg.Pool, Registerer: reg, Logger: log, Ops: opshttp.New(reg, log),
		Objects: testkit.NewObjectStore(t, testkit.FakeOK()).Store(t)}
	set, err := pipelines.Build(env, naming, []pipelines.Spec{all[i]})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for _, s := range set.Services {
		testkit.RunInBackground(t, s.Name(), s.Run)
		testkit.WaitFor(t, 30*time.Second, s.Name()+" ready", s.Ready)
	}
	srv := httptest.NewServer(env.Ops.Handler())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/api/v1/trades/imports", "application/json",
		strings.NewReader(`{"user_id":"r1","since":"2025-01-01","options":{"trades":20,"page_size":10}}`))
	if err != nil {
		t.Fatal(err)
	}
	var res trades.ImportResult
	_ = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || res.ImportID != trades.ImportID("r1", "2025-01-01", "synthetic") {
		t.Fatalf("POST: %d %+v", resp.StatusCode, res)
	}
	testkit.WaitFor(t, 30*time.Second, "the import completed", func() bool {
		for _, r := range k.ReadTopic(t, naming.Topic(topics.TradesEvents)) {
			if strings.Contains(string(r.Value), `"import.completed"`) {
				return true
			}
		}
		return false
	})
	resp, err = http.Get(srv.URL + "/api/v1/trades/imports/" + res.ImportID)
	if err != nil {
		t.Fatal(err)
	}
	var st trades.ImportState
	_ = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if st.Status != trades.StatusCompleted || st.Stored != 20 {
		t.Fatalf("GET: %d %+v", resp.StatusCode, st)
	}
	// trades-score took the import.completed: every trade is scored.
	testkit.WaitFor(t, 30*time.Second, "the trades scored", func() bool {
		return len(k.ReadTopic(t, naming.Topic(topics.TradesBias))) == 20
	})
	// The run's group consumed the run's input topic.
	testkit.WaitFor(t, 30*time.Second, "commits of the prefixed group", func() bool {
		offs, err := adm.FetchOffsets(ctx, naming.Group(trades.ImportName))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == naming.Topic(topics.TradesImport) && o.At > 0 {
				n++
			}
		})
		return n > 0
	})
}
