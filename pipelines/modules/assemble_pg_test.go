package modules

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
)

// assembleFixture is an assembler on a fresh schema and a refresh topic of
// its own.
type assembleFixture struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	kafka *testkit.Kafka
	topic string
	reg   *prometheus.Registry
	asm   *Assembler
}

func newAssembleFixture(t *testing.T, cfg AssembleConfig) *assembleFixture {
	t.Helper()
	ctx, pool := migrated(t)
	k := testkit.NewKafka(t)
	f := &assembleFixture{ctx: ctx, pool: pool, kafka: k, topic: k.Topic(t, "modules.refresh", 3), reg: prometheus.NewRegistry()}
	cfg.RefreshTopic = f.topic
	if cfg.Budget == 0 {
		// These tests check what an assemble answers, not its 5 s default
		// budget (TestAssembleSlowSynthesizer sets its own): under a loaded
		// CI run the first produce to the shared broker once took most of
		// it, and the synthesis came too late.
		cfg.Budget = time.Minute
	}
	asm, err := NewAssembler(pool, k.Client(t), f.reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.asm = asm
	return f
}

// seed writes a ready row of ticker × module fetched age ago (expiring
// with the module's data TTL), with its snapshot and analysis of input
// hash "h-<ticker>-<module>".
func (f *assembleFixture) seed(t *testing.T, ticker, module string, age time.Duration) {
	t.Helper()
	hash := "h-" + ticker + "-" + module
	if _, err := f.pool.Exec(f.ctx, `WITH r AS (
		INSERT INTO ticker_data_modules (ticker, module_id, status, fetched_at, expires_at, input_hash, state_epoch, state_version, updated_at)
		SELECT $1, $2, 'ready', now() - make_interval(secs => $3::float8 / 1e6),
			now() - make_interval(secs => $3::float8 / 1e6) + (ac.data_ttl_hours || ' hours')::interval, $4, 1, 1, now()
		FROM analysis_catalog ac WHERE ac.module_id = $2 RETURNING fetched_at),
	s AS (INSERT INTO module_snapshots (ticker, module_id, input_hash, fetched_at, payload)
		SELECT $1, $2, $4, fetched_at, jsonb_build_object('rows', $2::text) FROM r)
	INSERT INTO unit_analyses (ticker, module_id, input_hash, result, analyzed_at, expires_at)
		SELECT $1, $2, $4, jsonb_build_object('summary', 'summary of ' || $2::text), fetched_at, fetched_at + interval '1 day' FROM r`,
		ticker, module, age.Microseconds(), hash); err != nil {
		t.Fatalf("seed %s %s: %v", ticker, module, err)
	}
}

// requests returns the refresh requests on the topic, by key.
func (f *assembleFixture) requests(t *testing.T) map[string][]RefreshRequest {
	t.Helper()
	out := map[string][]RefreshRequest{}
	for _, r := range f.kafka.ReadTopic(t, f.topic) {
		var req RefreshRequest
		if err := json.Unmarshal(r.Value, &req); err != nil {
			t.Fatalf("record %s: %v", r.Value, err)
		}
		if string(r.Key) != req.Key() {
			t.Errorf("record key %s, request key %s", r.Key, req.Key())
		}
		out[string(r.Key)] = append(out[string(r.Key)], req)
	}
	return out
}

func byModule(a Assembly) map[string]ModuleView {
	m := map[string]ModuleView{}
	for _, v := range a.Modules {
		m[v.Module] = v
	}
	return m
}

// Fresh modules are served; stale, expired and absent ones get one job and
// one refresh each; stale or expired data within max_stale is served,
// other data listed as missing.
func TestAssembleFreshness(t *testing.T) {
	t.Parallel()
	f := newAssembleFixture(t, AssembleConfig{})
	h := time.Hour
	f.seed(t, "AAA", ModuleOptionsFlow, time.Minute) // fresh
	f.seed(t, "AAA", ModuleShortInterest, 2*h)       // stale (threshold 1 h), within max_stale 72 h
	f.seed(t, "AAA", ModuleDarkPool, 25*h)           // expired (TTL 24 h), no max_stale
	f.seed(t, "BBB", ModuleOptionsFlow, 2*h)         // expired (TTL 1 h), within max_stale 4 h
	f.seed(t, "BBB", ModuleDarkPool, 2*h)            // stale, no max_stale
	for _, m := range []string{ModuleOptionsFlow, ModuleShortInterest, ModuleDarkPool, ModulePriceAction} {
		f.seed(t, "CCC", m, time.Minute) // all fresh
	}

	aaa, err := f.asm.Assemble(f.ctx, AssembleRequest{Ticker: "aaa"})
	if err != nil {
		t.Fatal(err)
	}
	if aaa.Ticker != "AAA" || len(aaa.Modules) != 4 || aaa.Degraded || aaa.Synthesis == nil {
		t.Fatalf("AAA: %+v", aaa)
	}
	mods := byModule(aaa)
	for m, want := range map[string]struct {
		freshness string
		served    bool
	}{
		ModuleOptionsFlow:   {"fresh", true},
		ModuleShortInterest: {"stale", true},
		ModuleDarkPool:      {"expired", false},
		ModulePriceAction:   {"absent", false},
	} {
		v := mods[m]
		if v.Freshness != want.freshness || v.Served != want.served {
			t.Errorf("AAA %s: freshness %s served %v, want %s %v", m, v.Freshness, v.Served, want.freshness, want.served)
		}
		if want.served && (v.Analysis == nil || !strings.Contains(string(v.Analysis.Result), "summary of "+m) ||
			!strings.Contains(string(v.Data), m)) {
			t.Errorf("AAA %s served without its data or analysis: %+v", m, v)
		}
		if !want.served && (v.Data != nil || v.Analysis != nil) {
			t.Errorf("AAA %s not servable but has data: %+v", m, v)
		}
	}
	if want := []string{ModuleDarkPool, ModulePriceAction}; !slices.Equal(aaa.Missing, want) {
		t.Errorf("AAA missing %v, want %v", aaa.Missing, want)
	}
	wantJob := []string{ModuleDarkPool, ModulePriceAction, ModuleShortInterest}
	if aaa.Job == nil || !aaa.Job.Created || !slices.Equal(aaa.Job.Modules, wantJob) ||
		!strings.HasPrefix(aaa.Job.IdempotencyKey, "AAA_ticker_activity_analysis_dark_pool,price_action,short_interest_") {
		t.Fatalf("AAA job %+v", aaa.Job)
	}
	if !strings.Contains(aaa.Synthesis.Text, "summary of options_flow") || !strings.Contains(aaa.Synthesis.Text, "Missing: dark_pool, price_action") {
		t.Errorf("synthesis %q", aaa.Synthesis.Text)
	}

	bbb, err := f.asm.Assemble(f.ctx, AssembleRequest{Ticker: "BBB", Modules: []string{ModuleDarkPool, ModuleOptionsFlow}})
	if err != nil {
		t.Fatal(err)
	}
	mods = byModule(bbb)
	if v := mods[ModuleOptionsFlow]; v.Freshness != "expired" || !v.CanServeStale || !v.Served || v.Analysis == nil {
		t.Errorf("BBB options_flow: %+v", v)
	}
	if v := mods[ModuleDarkPool]; v.Freshness != "stale" || v.CanServeStale || v.Served {
		t.Errorf("BBB dark_pool: %+v", v)
	}
	if len(bbb.Modules) != 2 || !slices.Equal(bbb.Missing, []string{ModuleDarkPool}) || bbb.Job == nil ||
		!slices.Equal(bbb.Job.Modules, []string{ModuleDarkPool, ModuleOptionsFlow}) {
		t.Errorf("BBB: %+v job %+v", bbb, bbb.Job)
	}

	ccc, err := f.asm.Assemble(f.ctx, AssembleRequest{Ticker: "CCC"})
	if err != nil {
		t.Fatal(err)
	}
	if ccc.Job != nil || len(ccc.Missing) != 0 || len(ccc.Modules) != 4 {
		t.Errorf("CCC all fresh: missing %v job %+v", ccc.Missing, ccc.Job)
	}

	reqs := f.requests(t)
	want := map[string]string{
		"AAA:dark_pool": aaa.Job.JobID, "AAA:price_action": aaa.Job.JobID, "AAA:short_interest": aaa.Job.JobID,
		"BBB:dark_pool": bbb.Job.JobID, "BBB:options_flow": bbb.Job.JobID,
	}
	for key, job := range want {
		rs := reqs[key]
		if len(rs) != 1 || rs[0].Reason != ReasonAssemble || rs[0].JobID != job || rs[0].Force || rs[0].RequestID == "" {
			t.Errorf("%s: requests %+v, want one of job %s", key, rs, job)
		}
	}
	if len(reqs) != len(want) {
		t.Errorf("requests for %d keys, want %d: %v", len(reqs), len(want), reqs)
	}
	if n := testkit.Metric(t, f.reg, "sluice_modules_jobs_total", "created", "true"); n != 2 {
		t.Errorf("jobs_total{created=true} = %v, want 2", n)
	}
	if n := testkit.Metric(t, f.reg, "sluice_modules_assemble_total", "result", "ok"); n != 3 {
		t.Errorf("assemble_total{ok} = %v, want 3", n)
	}
}

// A second request of the same ticker and modules in the same UTC hour,
// differing in case and module order, gets the first one's job and
// produces no second refresh.
func TestAssembleSameJob(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 6, 14, 5, 0, 0, time.UTC)
	clock := make(chan time.Time, 2)
	clock <- now
	clock <- now.Add(50 * time.Minute).In(time.FixedZone("EST", -5*3600))
	f := newAssembleFixture(t, AssembleConfig{Now: func() time.Time { return <-clock }})
	first, err := f.asm.Assemble(f.ctx, AssembleRequest{Ticker: "nvda", Modules: []string{ModuleOptionsFlow, ModuleDarkPool}})
	if err != nil {
		t.Fatal(err)
	}
	second, err := f.asm.Assemble(f.ctx, AssembleRequest{Ticker: "NVDA", Modules: []string{ModuleDarkPool, ModuleOptionsFlow, ModuleDarkPool}})
	if err != nil {
		t.Fatal(err)
	}
	if first.Job == nil || second.Job == nil || !first.Job.Created || second.Job.Created || first.Job.JobID != second.Job.JobID ||
		first.Job.IdempotencyKey != "NVDA_ticker_activity_analysis_dark_pool,options_flow_2025-01-06T14" {
		t.Fatalf("jobs %+v and %+v", first.Job, second.Job)
	}
	if len(second.Job.Refreshed) != 0 {
		t.Errorf("second request refreshed %v", second.Job.Refreshed)
	}
	reqs := f.requests(t)
	if len(reqs) != 2 || len(reqs["NVDA:options_flow"]) != 1 || len(reqs["NVDA:dark_pool"]) != 1 {
		t.Errorf("requests %v, want one per module", reqs)
	}
	if n := testkit.Metric(t, f.reg, "sluice_modules_jobs_total", "created", "false"); n != 1 {
		t.Errorf("jobs_total{created=false} = %v, want 1", n)
	}
}

// slowSynth answers only once released, ignoring its context.
type slowSynth struct{ release chan struct{} }

func (s slowSynth) Synthesize(context.Context, SynthesisInput) (Synthesis, error) {
	<-s.release
	return Synthesis{Text: "late"}, nil
}

// A synthesis that does not finish within the budget is dropped: the
// answer comes without it, degraded, with the modules and the job.
func TestAssembleSlowSynthesizer(t *testing.T) {
	t.Parallel()
	slow := slowSynth{release: make(chan struct{})}
	t.Cleanup(func() { close(slow.release) })
	f := newAssembleFixture(t, AssembleConfig{Budget: 300 * time.Millisecond, Synthesizer: slow})
	f.seed(t, "SLOW", ModuleOptionsFlow, time.Minute)
	out, err := f.asm.Assemble(f.ctx, AssembleRequest{Ticker: "SLOW", Modules: []string{ModuleOptionsFlow, ModuleDarkPool}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Synthesis != nil || !out.Degraded || !byModule(out)[ModuleOptionsFlow].Served || out.Job == nil || !out.Job.Created {
		t.Fatalf("answer %+v job %+v", out, out.Job)
	}
	b, _ := json.Marshal(out)
	if !strings.Contains(string(b), `"synthesis":null`) || !strings.Contains(string(b), `"degraded":true`) {
		t.Errorf("JSON %s", b)
	}
	if n := testkit.Metric(t, f.reg, "sluice_modules_assemble_total", "result", "degraded"); n != 1 {
		t.Errorf("assemble_total{degraded} = %v, want 1", n)
	}
}

// failingProducer refuses every record.
type failingProducer struct{}

func (failingProducer) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	out := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		out[i] = kgo.ProduceResult{Record: r, Err: errors.New("broker down")}
	}
	return out
}

// When the refresh requests of a new job cannot be produced, the answer is
// degraded and the job removed, so that the next request creates it again
// and asks for the refreshes.
func TestAssembleProduceFailureRemovesJob(t *testing.T) {
	t.Parallel()
	f := newAssembleFixture(t, AssembleConfig{})
	broken, err := NewAssembler(f.pool, failingProducer{}, f.reg, AssembleConfig{RefreshTopic: f.topic})
	if err != nil {
		t.Fatal(err)
	}
	out, err := broken.Assemble(f.ctx, AssembleRequest{Ticker: "FAIL", Modules: []string{ModuleDarkPool}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Job == nil || !strings.Contains(out.Job.RefreshError, "broker down") || !out.Degraded || out.Synthesis == nil {
		t.Fatalf("answer %+v job %+v", out, out.Job)
	}
	var n int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM analysis_jobs`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d jobs left (%v)", n, err)
	}
	again, err := f.asm.Assemble(f.ctx, AssembleRequest{Ticker: "FAIL", Modules: []string{ModuleDarkPool}})
	if err != nil {
		t.Fatal(err)
	}
	if again.Job == nil || !again.Job.Created || again.Degraded || len(f.requests(t)["FAIL:dark_pool"]) != 1 {
		t.Errorf("retry: %+v job %+v", again, again.Job)
	}
}

// Bad input is refused with the rule it fails, before anything is read
// or produced.
func TestAssembleRules(t *testing.T) {
	t.Parallel()
	f := newAssembleFixture(t, AssembleConfig{})
	if _, err := f.pool.Exec(f.ctx, `UPDATE analysis_catalog SET enabled = false WHERE module_id = 'price_action'`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req  AssembleRequest
		rule string
	}{
		{AssembleRequest{}, RuleTicker},
		{AssembleRequest{Ticker: "1NVDA"}, RuleTicker},
		{AssembleRequest{Ticker: "NVDA", Modules: []string{"Options"}}, RuleModule},
		{AssembleRequest{Ticker: "NVDA", Modules: []string{ModuleDarkPool, "nope"}}, RuleUnknownModule},
		{AssembleRequest{Ticker: "NVDA", Modules: []string{ModulePriceAction}}, RuleUnknownModule},
	} {
		_, err := f.asm.Assemble(f.ctx, c.req)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Rule != c.rule {
			t.Errorf("%+v: %v, want input error %s", c.req, err, c.rule)
		}
	}
	// The default is every enabled module.
	out, err := f.asm.Assemble(f.ctx, AssembleRequest{Ticker: "NVDA"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{ModuleDarkPool, ModuleOptionsFlow, ModuleShortInterest}; out.Job == nil || !slices.Equal(out.Job.Modules, want) {
		t.Errorf("default modules: job %+v, want %v", out.Job, want)
	}
	if reqs := f.requests(t); len(reqs) != 3 {
		t.Errorf("requests %v, want 3 keys", reqs)
	}
}
