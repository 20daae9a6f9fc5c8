package modules

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages/run"
)

// N queued requests of one key cost one upstream call: the first fetches
// and writes ready; the others see that state (in the same batch) and
// skip as fresh. The snapshot, the analysis, the state and the mirrored
// row are written once each.
func TestRefreshStampedeOneUpstreamCall(t *testing.T) {
	t.Parallel()
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, nil)
	const n = 20
	key := "NVDA:options_flow"
	var recs []*kgo.Record
	for range n {
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: request("NVDA", ModuleOptionsFlow)})
	}
	f.produce(t, recs...)
	f.start(t)
	f.waitRequests(t, n)

	if c := f.src.Calls(key); c != 1 {
		t.Errorf("upstream calls = %d, want 1", c)
	}
	if got := f.metric(t, "requests_total", "outcome", "fetched"); got != 1 {
		t.Errorf("fetched = %v, want 1", got)
	}
	if got := f.metric(t, "requests_total", "outcome", "skipped_fresh"); got != n-1 {
		t.Errorf("skipped_fresh = %v, want %d", got, n-1)
	}
	if got := f.metric(t, "upstream_calls_total", "module", ModuleOptionsFlow, "result", "ok"); got != 1 {
		t.Errorf("upstream_calls_total{ok} = %v, want 1", got)
	}
	if got := f.metric(t, "analyses_total", "result", "computed"); got != 1 {
		t.Errorf("analyses computed = %v, want 1", got)
	}
	r := f.waitRow(t, "nvda", ModuleOptionsFlow, "row ready", func(r row) bool { return r.status == "ready" })
	if r.lockOwner != "" {
		t.Errorf("ready row keeps the lock of %q", r.lockOwner)
	}
	st := f.states(t)[key]
	if st.Status != StatusReady || st.Lease != nil || !AnalysisCurrent(st, time.Now()) || st.Analysis.AnalysisVersion != 1 {
		t.Errorf("state = %+v (analysis %+v)", st, st.Analysis)
	}
	if r.epoch != int64(st.Epoch) || r.version != st.Version {
		t.Errorf("row token (%d, %d), state token (%d, %d)", r.epoch, r.version, st.Epoch, st.Version)
	}
	if n := f.count(t, `SELECT count(*) FROM module_snapshots WHERE ticker = 'NVDA' AND input_hash = $1`, st.InputHash); n != 1 {
		t.Errorf("snapshots of the state's hash = %d", n)
	}
	if n := f.count(t, `SELECT count(*) FROM unit_analyses WHERE ticker = 'nvda' AND input_hash = $1 AND analysis_version = 1`, st.InputHash); n != 1 {
		t.Errorf("analyses of the state's hash = %d", n)
	}
}

// Keys and tickers differing only in letter case end on one state key: a
// record whose key differs from its request's only in case is re-keyed
// (the normalised request produced, this one committed).
func TestRefreshCaseVariantsOneStateKey(t *testing.T) {
	t.Parallel()
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, nil)
	f.produce(t,
		&kgo.Record{Key: []byte("nvda:dark_pool"), Value: request("nvda", ModuleDarkPool)},
		&kgo.Record{Key: []byte("Nvda:dark_pool"), Value: request("NVDA", ModuleDarkPool)},
		&kgo.Record{Key: []byte("NVDA:dark_pool"), Value: request("nVdA", ModuleDarkPool)},
	)
	f.start(t)
	f.waitRequests(t, 5) // 3, and the 2 re-keyed copies
	if got := f.metric(t, "requests_total", "outcome", "rekeyed"); got != 2 {
		t.Errorf("rekeyed = %v, want 2", got)
	}
	if c := f.src.total.Load(); c != 1 {
		t.Errorf("upstream calls = %d, want 1", c)
	}
	states := f.states(t)
	if len(states) != 1 || states["NVDA:dark_pool"].Status != StatusReady {
		t.Errorf("states = %+v, want NVDA:dark_pool ready only", states)
	}
	var rekeyed int
	for _, r := range f.k.ReadTopic(t, f.cfg.RefreshTopic) {
		if string(r.Key) == "NVDA:dark_pool" {
			var req RefreshRequest
			if err := json.Unmarshal(r.Value, &req); err != nil {
				t.Fatal(err)
			}
			if req.Ticker == "NVDA" {
				rekeyed++
			}
		}
	}
	if rekeyed != 2 { // the normalised copies of the two re-keyed records
		t.Errorf("%d normalised requests under NVDA:dark_pool, want 2", rekeyed)
	}
	f.waitRow(t, "NVDA", ModuleDarkPool, "row ready", func(r row) bool { return r.status == "ready" })
	if n := f.count(t, `SELECT count(*) FROM ticker_data_modules`); n != 1 {
		t.Errorf("%d mirrored rows, want 1", n)
	}
}

// Records the rules refuse go to modules.dlq with their original bytes,
// the reason and the rule; none reaches the upstream.
func TestRefreshBadInputsDeadLettered(t *testing.T) {
	t.Parallel()
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, nil)
	raw := func(m map[string]any) []byte {
		b, _ := json.Marshal(m)
		return b
	}
	cases := []struct {
		key          string
		value        []byte
		reason, rule string
	}{
		{"X:options_flow", []byte("not json"), "decode_error", ""},
		{"1BAD:options_flow", raw(map[string]any{"ticker": "1bad", "module": "options_flow"}), "sanity_fail", RuleTicker},
		{"NVDA:Bad-Mod", raw(map[string]any{"ticker": "NVDA", "module": "Bad-Mod"}), "sanity_fail", RuleModule},
		{"NVDA:nope", raw(map[string]any{"ticker": "NVDA", "module": "nope"}), "sanity_fail", RuleUnknownModule},
		{"NVDA:options_flow", raw(map[string]any{"ticker": "NVDA", "module": "options_flow", "force": "yes"}), "sanity_fail", RuleRequest},
		{"AAPL:options_flow", raw(map[string]any{"ticker": "NVDA", "module": "options_flow"}), "sanity_fail", RuleKey},
	}
	var recs []*kgo.Record
	for _, c := range cases {
		recs = append(recs, &kgo.Record{Key: []byte(c.key), Value: c.value})
	}
	f.produce(t, recs...)
	f.start(t)
	var dlq []*kgo.Record
	testkit.WaitFor(t, 60*time.Second, "dead letters", func() bool {
		dlq = f.dlq(t)
		return len(dlq) >= len(cases)
	})
	byValue := map[string]*kgo.Record{}
	for _, r := range dlq {
		byValue[string(r.Key)+"|"+string(r.Value)] = r
	}
	for _, c := range cases {
		r := byValue[c.key+"|"+string(c.value)]
		if r == nil {
			t.Errorf("%s %s: not dead-lettered with its original bytes", c.key, c.value)
			continue
		}
		stage := RefreshStageName
		if c.reason == "decode_error" {
			stage = RefreshGroup + "/decode"
		}
		if header(r, "dlq.reason") != c.reason || header(r, "dlq.rule") != c.rule || header(r, "dlq.stage") != stage {
			t.Errorf("%s: reason %q rule %q stage %q, want %s %s %s", c.key, header(r, "dlq.reason"), header(r, "dlq.rule"),
				header(r, "dlq.stage"), c.reason, c.rule, stage)
		}
	}
	if got := f.metric(t, "requests_total", "outcome", "error"); got != float64(len(cases)-1) {
		t.Errorf("requests_total{error} = %v, want %d (the decode error never reaches the stage)", got, len(cases)-1)
	}
	if c := f.src.total.Load(); c != 0 {
		t.Errorf("%d upstream calls", c)
	}
}

// Upstream refusals: a 4xx is modules.upstream_rejected, a payload over
// 4 MiB modules.snapshot_too_large, transient failures outlasting the
// attempts retries_exhausted with modules.upstream; each turns the state
// error (mirrored, lock cleared), and a request within the cooldown is
// skipped without an upstream call.
func TestRefreshUpstreamFailures(t *testing.T) {
	t.Parallel()
	faults, err := ParseFaults("GONE=not_found,BIG=too_large,FAILX=transient")
	if err != nil {
		t.Fatal(err)
	}
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, func(c *Config) {
		c.Source = newCountingSource(NewSynthetic(SyntheticConfig{Faults: faults}))
	})
	f.src = f.cfg.Source.(*countingSource)
	f.produce(t,
		&kgo.Record{Key: []byte("GONE:options_flow"), Value: request("GONE", ModuleOptionsFlow)},
		&kgo.Record{Key: []byte("BIG:options_flow"), Value: request("BIG", ModuleOptionsFlow)},
		&kgo.Record{Key: []byte("FAILX:options_flow"), Value: request("FAILX", ModuleOptionsFlow)},
	)
	f.start(t)
	var dlq []*kgo.Record
	testkit.WaitFor(t, 60*time.Second, "dead letters", func() bool {
		dlq = f.dlq(t)
		return len(dlq) >= 3
	})
	want := map[string][2]string{
		"GONE:options_flow":  {"sanity_fail", RuleUpstreamRejected},
		"BIG:options_flow":   {"sanity_fail", RuleSnapshotTooLarge},
		"FAILX:options_flow": {"retries_exhausted", RuleUpstream},
	}
	for _, r := range dlq {
		w := want[string(r.Key)]
		if header(r, "dlq.reason") != w[0] || header(r, "dlq.rule") != w[1] {
			t.Errorf("%s: reason %q rule %q, want %v", r.Key, header(r, "dlq.reason"), header(r, "dlq.rule"), w)
		}
	}
	for _, tk := range []string{"GONE", "BIG", "FAILX"} {
		r := f.waitRow(t, tk, ModuleOptionsFlow, tk+" row error", func(r row) bool { return r.status == "error" })
		if r.lastError == "" || strings.HasPrefix(r.lastError, "dead-letter") || r.lockOwner != "" {
			t.Errorf("%s row = %+v, want the upstream's error and no lock", tk, r)
		}
	}
	if c := f.src.Calls("FAILX:options_flow"); c != f.cfg.Retry.MaxAttempts {
		t.Errorf("FAILX: %d upstream calls, want %d attempts", c, f.cfg.Retry.MaxAttempts)
	}
	if got := f.metric(t, "upstream_calls_total", "result", "rejected"); got != 1 {
		t.Errorf("upstream_calls_total{rejected} = %v, want 1", got)
	}
	// Within the cooldown, a new request is skipped.
	before := f.src.Calls("GONE:options_flow")
	f.produce(t, &kgo.Record{Key: []byte("GONE:options_flow"), Value: request("GONE", ModuleOptionsFlow)})
	testkit.WaitFor(t, 30*time.Second, "cooldown skip", func() bool {
		return f.metric(t, "requests_total", "outcome", "skipped_cooldown") == 1
	})
	if c := f.src.Calls("GONE:options_flow"); c != before {
		t.Errorf("a request in the cooldown called the upstream (%d → %d)", before, c)
	}
}

// A 429 waits without spending an attempt: four 429s in a row with two
// attempts allowed still end ready, nothing dead-lettered.
func TestRefreshRateLimitedSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, func(c *Config) {
		c.Retry.MaxAttempts = 2
	})
	f.src.hook = func(_ context.Context, key string, call int) (Snapshot, error, bool) {
		if key == "RL:options_flow" && call <= 4 {
			return Snapshot{}, &UpstreamError{Status: 429, RetryAfter: 20 * time.Millisecond}, true
		}
		return Snapshot{}, nil, false
	}
	f.produce(t, &kgo.Record{Key: []byte("RL:options_flow"), Value: request("RL", ModuleOptionsFlow)})
	f.start(t)
	f.waitRow(t, "RL", ModuleOptionsFlow, "row ready", func(r row) bool { return r.status == "ready" })
	if c := f.src.Calls("RL:options_flow"); c != 5 {
		t.Errorf("upstream calls = %d, want 5", c)
	}
	if got := f.metric(t, "upstream_calls_total", "result", "rate_limited"); got != 4 {
		t.Errorf("rate_limited calls = %v, want 4", got)
	}
	if dlq := f.dlq(t); len(dlq) != 0 {
		t.Errorf("%d dead letters", len(dlq))
	}
}

// stateRecord is a modules.state record of s in the partition of its key,
// with the token headers the runtime writes when tokened.
func (f *svcFixture) stateRecord(t *testing.T, s State, tokened bool) *kgo.Record {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte(s.Key())
	r := &kgo.Record{Topic: f.cfg.StateTopic, Key: key, Value: b,
		Partition: int32(kgo.StickyKeyPartitioner(nil).ForTopic(f.cfg.RefreshTopic).Partition(&kgo.Record{Key: key}, 3))}
	if tokened {
		r.Headers = []kgo.RecordHeader{
			{Key: run.HeaderStateEpoch, Value: []byte(strconv.Itoa(int(s.Epoch)))},
			{Key: run.HeaderStateVersion, Value: []byte(strconv.FormatInt(s.Version, 10))},
		}
	}
	return r
}

func (f *svcFixture) produceStates(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	cl := f.k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(f.ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// A zombie's late state record (a smaller epoch, a huge version) is
// ignored by the restore, whether the runtime stamped it (refused by the
// partition's epoch floor) or not (refused by the fold on the state's own
// token), and by the mirror (the row's token is greater).
func TestZombieStateIgnoredOnRestoreAndMirror(t *testing.T) {
	t.Parallel()
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, nil)
	now := time.Now().UTC()
	m := testCatalog()[ModuleOptionsFlow]
	ready := func(ticker string, version int64) State {
		a := &Analysis{InputHash: "h-" + ticker, AnalysisVersion: 1, AnalyzedAt: at(now), ExpiresAt: at(now.Add(m.AnalysisTTL))}
		return State{Ticker: ticker, Module: ModuleOptionsFlow, Status: StatusMissing}.Ready(m, "h-"+ticker, "", a, run.Token{Epoch: 5, Version: version}, now)
	}
	zombie := func(s State, version int64) State {
		return s.Failed(nil, run.Token{Epoch: 2, Version: version}, now)
	}
	nvda, amd := ready("NVDA", 3), ready("AMD", 4)
	f.produceStates(t,
		f.stateRecord(t, nvda, true), f.stateRecord(t, zombie(nvda, 999), true),
		f.stateRecord(t, amd, true), f.stateRecord(t, zombie(amd, 1000), false),
	)
	f.start(t)
	f.produce(t,
		&kgo.Record{Key: []byte("NVDA:options_flow"), Value: request("NVDA", ModuleOptionsFlow)},
		&kgo.Record{Key: []byte("AMD:options_flow"), Value: request("AMD", ModuleOptionsFlow)},
	)
	f.waitRequests(t, 2)
	if got := f.metric(t, "requests_total", "outcome", "skipped_fresh"); got != 2 {
		t.Errorf("skipped_fresh = %v, want 2 (a zombie's error state won the restore: %v cooldown skips)",
			got, f.metric(t, "requests_total", "outcome", "skipped_cooldown"))
	}
	if c := f.src.total.Load(); c != 0 {
		t.Errorf("%d upstream calls", c)
	}
	if got := f.metric(t, "fenced_total", "where", "restore"); got != 1 {
		t.Errorf("fenced_total{restore} = %v, want 1 (the unstamped zombie)", got)
	}
	if got := testkit.Metric(t, f.reg, "sluice_state_fenced_total", "store", "modules-state", "where", "restore"); got != 1 {
		t.Errorf("runtime restore fence = %v, want 1 (the stamped zombie)", got)
	}
	for _, s := range []State{nvda, amd} {
		r := f.waitRow(t, s.Ticker, ModuleOptionsFlow, s.Ticker+" row", func(r row) bool { return r.epoch == 5 })
		if r.status != "ready" || r.version != s.Version {
			t.Errorf("%s row = %+v, want the ready state (5, %d)", s.Ticker, r, s.Version)
		}
	}
	// A later zombie record reaches the mirror on its own: fenced, the row
	// unchanged.
	f.produceStates(t, f.stateRecord(t, zombie(nvda, 5000), true))
	testkit.WaitFor(t, 30*time.Second, "mirror fence", func() bool {
		return f.metric(t, "fenced_total", "where", "mirror") >= 1
	})
	if r, _ := f.row(t, "NVDA", ModuleOptionsFlow); r.status != "ready" || r.epoch != 5 || r.version != 3 {
		t.Errorf("NVDA row after the zombie = %+v", r)
	}
}

// A member stopped between refreshing and ready leaves the request
// uncommitted and the state refreshing under its lease; the next owner
// (a greater epoch) takes the redelivered request over and finishes it.
func TestRefreshTakeoverAfterRevoke(t *testing.T) {
	t.Parallel()
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, nil)
	f.src.hook = func(ctx context.Context, key string, call int) (Snapshot, error, bool) {
		if call == 1 {
			<-ctx.Done() // the first owner never gets an answer
			return Snapshot{}, ctx.Err(), true
		}
		return Snapshot{}, nil, false
	}
	key := "TK:price_action"
	a := f.start(t)
	f.produce(t, &kgo.Record{Key: []byte(key), Value: request("TK", ModulePriceAction)})
	var leased State
	testkit.WaitFor(t, 30*time.Second, "lease of the first member", func() bool {
		leased = f.states(t)[key]
		return leased.Status == StatusRefreshing && leased.Lease != nil && leased.Lease.Owner == a.id
	})
	a.stop()
	b := f.start(t)
	r := f.waitRow(t, "TK", ModulePriceAction, "row ready", func(r row) bool { return r.status == "ready" })
	if r.epoch <= int64(leased.Epoch) || r.lockOwner != "" {
		t.Errorf("row %+v, want ready at an epoch above %d", r, leased.Epoch)
	}
	if got := f.metric(t, "takeovers_total"); got != 1 {
		t.Errorf("takeovers_total = %v, want 1", got)
	}
	if c := f.src.Calls(key); c != 2 {
		t.Errorf("upstream calls = %d, want 2", c)
	}
	st := f.states(t)[key]
	if st.Status != StatusReady || st.Lease != nil {
		t.Errorf("final state %+v", st)
	}
	b.stop()
}

// flakyAnalyzer fails its first call, then analyses like the default.
type flakyAnalyzer struct {
	Analyzer
	calls atomic.Int32
}

func (a *flakyAnalyzer) Analyze(ctx context.Context, ticker string, payload json.RawMessage) (json.RawMessage, error) {
	if a.calls.Add(1) == 1 {
		return nil, errors.New("model unavailable")
	}
	return a.Analyzer.Analyze(ctx, ticker, payload)
}

// A failed analysis leaves the data ready with analysis.error set and
// dead-letters the request (exception, modules.analyzer.<module>); the
// next request analyses the stored snapshot again without an upstream
// call (analysis_only). A forced refresh of the same content reuses the
// stored analysis of its input hash (cache_hit).
func TestRefreshAnalysisFailureAndReuse(t *testing.T) {
	t.Parallel()
	flaky := &flakyAnalyzer{Analyzer: DefaultAnalyzers()[ModuleDarkPool]}
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, func(c *Config) {
		c.Analyzers = DefaultAnalyzers()
		c.Analyzers[ModuleDarkPool] = flaky
	})
	key := "AN:dark_pool"
	f.start(t)
	f.produce(t, &kgo.Record{Key: []byte(key), Value: request("AN", ModuleDarkPool)})
	var dlq []*kgo.Record
	testkit.WaitFor(t, 60*time.Second, "the analyzer's dead letter", func() bool {
		dlq = f.dlq(t)
		return len(dlq) == 1
	})
	if r := dlq[0]; header(r, "dlq.reason") != "exception" || header(r, "dlq.rule") != RuleAnalyzerPrefix+ModuleDarkPool {
		t.Errorf("dead letter reason %q rule %q", header(r, "dlq.reason"), header(r, "dlq.rule"))
	}
	testkit.WaitFor(t, 30*time.Second, "ready state with the analysis error", func() bool {
		st := f.states(t)[key]
		return st.Status == StatusReady && st.Analysis != nil && st.Analysis.Error != ""
	})

	f.produce(t, &kgo.Record{Key: []byte(key), Value: request("AN", ModuleDarkPool)})
	testkit.WaitFor(t, 30*time.Second, "analysis only", func() bool {
		return f.metric(t, "requests_total", "outcome", "analysis_only") == 1
	})
	st := f.states(t)[key]
	if !AnalysisCurrent(st, time.Now()) || st.Analysis.AnalysisVersion != 1 {
		t.Errorf("state after analysis only: %+v (analysis %+v)", st, st.Analysis)
	}

	forced, _ := json.Marshal(map[string]any{"ticker": "AN", "module": ModuleDarkPool, "force": true})
	f.produce(t, &kgo.Record{Key: []byte(key), Value: forced})
	testkit.WaitFor(t, 30*time.Second, "forced fetch", func() bool {
		return f.metric(t, "requests_total", "outcome", "fetched") == 2
	})
	if c := f.src.Calls(key); c != 2 {
		t.Errorf("upstream calls = %d, want 2 (the failed analysis and the forced refresh)", c)
	}
	for result, want := range map[string]float64{"error": 1, "computed": 1, "cache_hit": 1} {
		if got := f.metric(t, "analyses_total", "module", ModuleDarkPool, "result", result); got != want {
			t.Errorf("analyses_total{%s} = %v, want %v", result, got, want)
		}
	}
	if n := f.count(t, `SELECT count(*) FROM unit_analyses WHERE ticker = 'AN'`); n != 1 {
		t.Errorf("%d analyses stored, want 1", n)
	}
}

// failingBegin fails the first n transactions with a serialization
// failure (transient).
type failingBegin struct {
	DB
	left atomic.Int32
}

func (d *failingBegin) Begin(ctx context.Context) (pgx.Tx, error) {
	if d.left.Add(-1) >= 0 {
		return nil, &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
	}
	return d.DB.Begin(ctx)
}

// A PostgreSQL failure after the fetch waits without spending an attempt
// (one attempt allowed) and writes the fetched snapshot on the next one,
// without calling the upstream again.
func TestRefreshPostgresOutageKeepsTheFetch(t *testing.T) {
	t.Parallel()
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, func(c *Config) {
		c.Retry.MaxAttempts = 1
		c.wrapDB = func(db DB) DB {
			fb := &failingBegin{DB: db}
			fb.left.Store(2)
			return fb
		}
	})
	f.produce(t, &kgo.Record{Key: []byte("PG:price_action"), Value: request("PG", ModulePriceAction)})
	f.start(t)
	f.waitRow(t, "PG", ModulePriceAction, "row ready", func(r row) bool { return r.status == "ready" })
	if c := f.src.Calls("PG:price_action"); c != 1 {
		t.Errorf("upstream calls = %d, want 1", c)
	}
	if dlq := f.dlq(t); len(dlq) != 0 {
		t.Errorf("%d dead letters", len(dlq))
	}
	if n := f.count(t, `SELECT count(*) FROM module_snapshots WHERE ticker = 'PG'`); n != 1 {
		t.Errorf("%d snapshots", n)
	}
}

// A 401 is fatal: the refresh service stops with the upstream's error,
// nothing is dead-lettered and the request stays uncommitted for a run
// with valid credentials.
func TestRefreshUnauthorizedIsFatal(t *testing.T) {
	t.Parallel()
	faults, err := ParseFaults("NOAUTH=unauthorized")
	if err != nil {
		t.Fatal(err)
	}
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, func(c *Config) {
		c.Source = newCountingSource(NewSynthetic(SyntheticConfig{Faults: faults}))
	})
	f.produce(t, &kgo.Record{Key: []byte("NOAUTH:options_flow"), Value: request("NOAUTH", ModuleOptionsFlow)})
	svcs, err := Services(f.env, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopMirror := testkit.RunInBackground(t, svcs[1].Name(), svcs[1].Run)
	errc := make(chan error, 1)
	go func() { errc <- svcs[0].Run(testkit.Context(t)) }()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("refresh Run = %v, want the 401", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the refresh service did not stop on a 401")
	}
	if err := stopMirror(); err != nil {
		t.Errorf("mirror: %v", err)
	}
	if dlq := f.dlq(t); len(dlq) != 0 {
		t.Errorf("%d dead letters", len(dlq))
	}
}

// A modules.state record that is not a state is dead-lettered by the
// mirror (decode_error) and skipped by the refresh's restore; a tombstone
// changes no row.
func TestMirrorBadStateRecords(t *testing.T) {
	t.Parallel()
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, nil)
	good := f.stateRecord(t, State{Ticker: "OK", Module: ModuleDarkPool, Status: StatusMissing}.
		Ready(testCatalog()[ModuleDarkPool], "h", "", nil, run.Token{Epoch: 1, Version: 1}, time.Now()), true)
	bad := &kgo.Record{Topic: f.cfg.StateTopic, Key: []byte("BAD:dark_pool"), Value: []byte(`{"ticker":"BAD"}`), Partition: 0}
	tomb := &kgo.Record{Topic: f.cfg.StateTopic, Key: good.Key, Partition: good.Partition}
	// A state after the tombstone in its partition: once its row is there,
	// the tombstone was read.
	sentinel := f.stateRecord(t, State{Ticker: "SENT", Module: ModuleDarkPool, Status: StatusMissing}.
		Ready(testCatalog()[ModuleDarkPool], "h", "", nil, run.Token{Epoch: 1, Version: 2}, time.Now()), true)
	sentinel.Partition = good.Partition
	f.produceStates(t, good, bad, tomb, sentinel)
	f.start(t)
	var dlq []*kgo.Record
	testkit.WaitFor(t, 60*time.Second, "the mirror's dead letter", func() bool {
		dlq = f.dlq(t)
		return len(dlq) == 1
	})
	if r := dlq[0]; string(r.Key) != "BAD:dark_pool" || header(r, "dlq.reason") != "decode_error" || header(r, "dlq.stage") != MirrorGroup+"/decode" {
		t.Errorf("dead letter %s: reason %q stage %q", r.Key, header(r, "dlq.reason"), header(r, "dlq.stage"))
	}
	f.waitRow(t, "SENT", ModuleDarkPool, "the sentinel's row", func(r row) bool { return r.status == "ready" })
	if r, ok := f.row(t, "OK", ModuleDarkPool); !ok || r.status != "ready" {
		t.Errorf("OK row = %+v, %v: the tombstone must leave it", r, ok)
	}
	if got := testkit.Metric(t, f.reg, "sluice_state_restore_skipped_total", "store", "modules-state"); got != 1 {
		t.Errorf("restore skipped %v records, want 1", got)
	}
}

// countingDB counts the refresh's transactions and its statements outside
// them.
type countingDB struct {
	DB
	begins, outside atomic.Int32
}

func (d *countingDB) Begin(ctx context.Context) (pgx.Tx, error) {
	d.begins.Add(1)
	return d.DB.Begin(ctx)
}

func (d *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	d.outside.Add(1)
	return d.DB.QueryRow(ctx, sql, args...)
}

// A fetched refresh costs PostgreSQL one transaction: the analysis cache
// read, the snapshot and the analysis go together, nothing outside it.
func TestRefreshOneTransactionPerFetch(t *testing.T) {
	t.Parallel()
	db := &countingDB{}
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, func(c *Config) {
		c.wrapDB = func(inner DB) DB {
			db.DB = inner
			return db
		}
	})
	keys := []string{"ONE", "TWO", "THREE"}
	for _, k := range keys {
		f.produce(t, &kgo.Record{Key: []byte(k + ":price_action"), Value: request(k, ModulePriceAction)})
	}
	f.start(t)
	for _, k := range keys {
		f.waitRow(t, k, ModulePriceAction, "row ready", func(r row) bool { return r.status == "ready" })
	}
	if b, o := db.begins.Load(), db.outside.Load(); b != int32(len(keys)) || o != 0 {
		t.Errorf("%d transactions and %d statements outside them for %d fetches; want %d and 0", b, o, len(keys), len(keys))
	}
}
