package modules

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// The demo's stampede: 50 requests of one key produced at once cost one
// upstream call (counted by the source and by
// sluice_modules_upstream_calls_total) and one snapshot; the key ends
// ready in ticker_data_modules. The assemble that follows serves that
// module, lists the three others as missing and creates their job, which
// ends done once their refreshes are mirrored.
func TestDemoScenarioStampedeOneUpstreamCall(t *testing.T) {
	t.Parallel()
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, nil)
	f.start(t)
	const n = 50
	res, err := DemoScenario(f.ctx, f.env, f.cfg, DemoOptions{Ticker: "amd", Requests: n, Metrics: f.reg, Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	key := "AMD:options_flow"
	if res.Key != key || res.Requests != n {
		t.Fatalf("key %q, requests %d; want %q, %d", res.Key, res.Requests, key, n)
	}
	if res.UpstreamCalls != 1 {
		t.Errorf("result: upstream calls = %d, want 1", res.UpstreamCalls)
	}
	if c := f.src.Calls(key); c != 1 {
		t.Errorf("source: upstream calls of %s = %d, want 1", key, c)
	}
	if got := f.metric(t, "upstream_calls_total", "module", ModuleOptionsFlow); got != 1 {
		t.Errorf("sluice_modules_upstream_calls_total{module=options_flow} = %v, want 1", got)
	}
	if got := f.metric(t, "requests_total", "module", ModuleOptionsFlow); got != n {
		t.Errorf("sluice_modules_requests_total{module=options_flow} = %v, want %d", got, n)
	}
	if res.Outcomes["fetched"] != 1 || sum(res.Outcomes) != n {
		t.Errorf("outcomes = %v, want fetched 1 of %d", res.Outcomes, n)
	}
	if res.State.Status != string(StatusReady) || res.State.Freshness != string(FreshnessFresh) {
		t.Errorf("state = %s/%s, want ready/fresh", res.State.Status, res.State.Freshness)
	}
	if r, ok := f.row(t, "AMD", ModuleOptionsFlow); !ok || r.status != "ready" {
		t.Errorf("ticker_data_modules AMD options_flow = %+v (found %v), want ready", r, ok)
	}
	if c := f.count(t, `SELECT count(*) FROM module_snapshots WHERE ticker = 'AMD' AND module_id = 'options_flow'`); c != 1 {
		t.Errorf("snapshots of %s = %d, want 1", key, c)
	}

	a := res.Assembly
	others := []string{ModuleDarkPool, ModulePriceAction, ModuleShortInterest}
	if got := a.Served(); !slices.Equal(got, []string{ModuleOptionsFlow}) {
		t.Errorf("served %v, want [options_flow]", got)
	}
	if !slices.Equal(a.Missing, others) {
		t.Errorf("missing %v, want %v", a.Missing, others)
	}
	if a.Degraded || a.Synthesis == nil {
		t.Fatalf("degraded %v, synthesis %v", a.Degraded, a.Synthesis)
	}
	for _, want := range []string{"AMD options_flow: fresh", "Missing: dark_pool, price_action, short_interest."} {
		if !strings.Contains(a.Synthesis.Text, want) {
			t.Errorf("synthesis lacks %q:\n%s", want, a.Synthesis.Text)
		}
	}
	if a.Job == nil || !a.Job.Created || !slices.Equal(a.Job.Modules, others) || !slices.Equal(a.Job.Refreshed, others) {
		t.Fatalf("job = %+v, want one created for %v with their refreshes", a.Job, others)
	}
	if res.Job == nil || res.Job.JobID != a.Job.JobID || res.Job.Status != "done" {
		t.Fatalf("job after its refreshes = %+v, want %s done", res.Job, a.Job.JobID)
	}
	if c := f.count(t, `SELECT count(*) FROM analysis_jobs WHERE job_id = $1 AND ticker = 'AMD' AND modules = $2`, a.Job.JobID, others); c != 1 {
		t.Errorf("analysis_jobs rows of %s = %d, want 1", a.Job.JobID, c)
	}
	for _, m := range others {
		if c := f.src.Calls(Key("AMD", m)); c != 1 {
			t.Errorf("upstream calls of AMD:%s = %d, want 1 (the job's refresh)", m, c)
		}
	}
}
