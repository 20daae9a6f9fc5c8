package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/topics"
)

// sluice run modules checks its declared topics, then runs both groups: a
// refresh request ends as a ready row of ticker_data_modules.
func TestRunModules(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	r := testkit.NewRedis(t, testkit.FakeOK())
	pg := testkit.NewPostgres(t)
	prefix := testkit.Name(t, "") + "."
	args := []string{"run", "modules", "--brokers", strings.Join(k.Brokers, ","), "--redis-url", r.URL,
		"--database-url", pg.URL, "--ops-addr", "", "--topic-prefix", prefix, "--group-prefix", prefix, "--log-level", "error"}
	_, err := runCLI(t, args...)
	singleLine(t, err, "pipeline modules: topic(s) "+prefix+topics.ModulesRefresh+", "+prefix+topics.ModulesState+", "+prefix+topics.ModulesDLQ+
		" do not exist (run sluice topics ensure --prefix "+prefix+")")

	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	policy := "compact"
	compact := map[string]*string{"cleanup.policy": &policy}
	for _, tc := range []struct {
		name string
		cfg  map[string]*string
	}{{topics.ModulesRefresh, nil}, {topics.ModulesState, compact}, {topics.ModulesDLQ, nil}} {
		name := prefix + tc.name
		if _, err := k.Admin(t).CreateTopic(ctx, 3, -1, tc.cfg, name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = k.Admin(t).DeleteTopic(context.Background(), name) })
		testkit.WaitFor(t, 30*time.Second, name+" visible", func() bool {
			d, err := k.Admin(t).ListTopics(ctx, name)
			return err == nil && d.Has(name) && len(d[name].Partitions) == 3
		})
	}
	out, _ := startCLI(t, args...)
	req, _ := json.Marshal(map[string]any{"ticker": "nvda", "module": "dark_pool", "requested_at": time.Now().UTC()})
	if err := k.Client(t).ProduceSync(ctx, &kgo.Record{Topic: prefix + topics.ModulesRefresh, Key: []byte("NVDA:dark_pool"), Value: req}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 60*time.Second, "the row ready", func() bool {
		var status string
		err := pg.Pool.QueryRow(ctx, `SELECT status FROM ticker_data_modules WHERE ticker = 'NVDA' AND module_id = 'dark_pool'`).Scan(&status)
		return err == nil && status == "ready"
	})
	if s := out.String(); strings.Contains(s, "level=ERROR") || strings.Contains(s, `"level":"ERROR"`) {
		t.Errorf("errors logged:\n%s", s)
	}
}
