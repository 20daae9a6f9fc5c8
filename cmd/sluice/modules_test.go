package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/modules"
	"github.com/sluicehq/sluice/schemas"
)

// The modules commands against a migrated schema and a refresh topic of
// the test's own: catalog, analyze (job and refresh requests), jobs,
// status, refresh in process and over the API, and one-line errors.
func TestModulesCommands(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t)
	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	k := testkit.NewKafka(t, testkit.FakeOK())
	topic := k.Topic(t, "modules.refresh", 3)
	// Every subcommand reads PostgreSQL; refresh and analyze also produce.
	common := []string{"--database-url", pg.URL}
	produce := []string{"--brokers", strings.Join(k.Brokers, ","), "--refresh-topic", topic}
	cli := func(args ...string) (string, error) {
		t.Helper()
		args = append(args, common...)
		if args[1] == "refresh" || args[1] == "analyze" {
			args = append(args, produce...)
		}
		return runCLI(t, args...)
	}

	out, err := cli("modules", "catalog", "--json")
	if err != nil || strings.Count(out, "\n") != 4 || !strings.Contains(out, `"freshness_threshold_hours":0.25`) {
		t.Fatalf("catalog: %v\n%s", err, out)
	}
	out, err = cli("modules", "analyze", "nvda", "--modules", "options_flow,dark_pool", "--json")
	var a modules.Assembly
	if err != nil || json.Unmarshal([]byte(out), &a) != nil || a.Job == nil || !a.Job.Created || len(a.Missing) != 2 {
		t.Fatalf("analyze: %v\n%s", err, out)
	}
	out, err = cli("modules", "jobs", a.Job.JobID)
	if err != nil || !strings.Contains(out, "job "+a.Job.JobID+" pending: NVDA ticker_activity_analysis") {
		t.Errorf("jobs: %v\n%s", err, out)
	}
	out, err = cli("modules", "status", "NVDA", "--module", "dark_pool")
	if err != nil || !strings.Contains(out, "NVDA    dark_pool  missing  absent") {
		t.Errorf("status: %v\n%s", err, out)
	}
	out, err = cli("modules", "refresh", "NVDA", "short_interest")
	if err != nil || !strings.Contains(out, "NVDA:short_interest refresh requested") {
		t.Errorf("refresh: %v\n%s", err, out)
	}

	// Over the API of a running process.
	asm, err := modules.NewAssembler(pg.Pool, k.Client(t), prometheus.NewRegistry(), modules.AssembleConfig{RefreshTopic: topic})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for p, h := range asm.Routes() {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	out, err = cli("modules", "refresh", "nvda", "price_action", "--api", srv.URL)
	if err != nil || !strings.Contains(out, "NVDA:price_action refresh requested") {
		t.Errorf("refresh --api: %v\n%s", err, out)
	}
	_, err = cli("modules", "refresh", "NVDA", "nope", "--api", srv.URL)
	if err == nil || err.Error() != `modules.unknown_module: module "nope" is not in the catalog (HTTP 400)` {
		t.Errorf("refresh --api unknown module: %v", err)
	}
	// Nothing runs the refresh group: the wait runs out.
	_, err = cli("modules", "refresh", "NVDA", "dark_pool", "--wait", "1s")
	if err == nil || !strings.Contains(err.Error(), "NVDA:dark_pool not refreshed after 1s (status missing, freshness absent)") {
		t.Errorf("refresh --wait: %v", err)
	}

	keys := map[string]int{}
	for _, r := range k.ReadTopic(t, topic) {
		keys[string(r.Key)]++
	}
	want := map[string]int{"NVDA:options_flow": 1, "NVDA:dark_pool": 2, "NVDA:short_interest": 1, "NVDA:price_action": 1}
	for key, n := range want {
		if keys[key] != n {
			t.Errorf("%s: %d requests, want %d (all: %v)", key, keys[key], n, keys)
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"modules", "status", "1X"}, `modules.ticker: ticker "1X" does not match`},
		{[]string{"modules", "analyze", "NVDA", "--modules", "Dark"}, `modules.module: module "Dark" does not match`},
		{[]string{"modules", "jobs", "42"}, `modules.request: job_id "42" is not a UUID`},
		{[]string{"modules", "refresh", "NVDA", "nope"}, `modules.unknown_module: module "nope" is not in the catalog`},
	} {
		_, err := cli(c.args...)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line starting %q", c.args, err, c.want)
		}
	}
}
