package trades_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/trades"
)

// testTokenKey is a BROKER_TOKEN_KEY for tests (64 hex digits).
const testTokenKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

// connect stores an active broker connection of user with token sealed.
func (f *importFixture) connect(t *testing.T, key *trades.TokenSealer, user, broker, token string, active bool) {
	t.Helper()
	sealed, err := key.Seal([]byte(token), user, broker, trades.TokenAccess)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.pg.Pool.Exec(context.Background(),
		`INSERT INTO broker_connections (user_id, broker, access_enc, active) VALUES ($1, $2, $3, $4)`, user, broker, sealed, active); err != nil {
		t.Fatal(err)
	}
}

// A coinbase import reads the user's active connection, opens its token
// and imports every fill; a 401 fails the run (import.failed
// {sanity_fail, trades.broker_auth}, the page dead-lettered); a user
// without an active connection fails at once (trades.broker_connection).
// The token appears in no log line.
func TestCoinbaseImportThroughService(t *testing.T) {
	t.Parallel()
	key, err := trades.ParseTokenKey(testTokenKey)
	if err != nil {
		t.Fatal(err)
	}
	fake, srv := newFakeCoinbase(t, "tok-good-6c1f", 25)
	fake.throttle = "c10"
	cb := trades.NewCoinbase(srv.URL, srv.Client())
	cb.Limit = 10
	f := newImportFixture(t, false, func(c *trades.ImportConfig) {
		c.TokenKey = key
		c.Adapters = map[string]trades.BrokerAdapter{trades.BrokerCoinbase: cb}
		c.MaxPageWait = 0 // default: the 2 s Retry-After is well inside it
	})
	f.connect(t, key, "good", trades.BrokerCoinbase, "tok-good-6c1f", true)
	f.connect(t, key, "revoked", trades.BrokerCoinbase, "tok-revoked-99aa", true)
	f.connect(t, key, "inactive", trades.BrokerCoinbase, "tok-good-6c1f", false)
	f.start(t)

	good := importCmd("good", since, trades.BrokerCoinbase, false, nil)
	revoked := importCmd("revoked", since, trades.BrokerCoinbase, false, nil)
	inactive := importCmd("inactive", since, trades.BrokerCoinbase, false, nil)
	none := importCmd("nobody", since, trades.BrokerCoinbase, false, nil)
	f.send(t, "good", good)
	f.send(t, "revoked", revoked)
	f.send(t, "inactive", inactive)
	f.send(t, "nobody", none)
	evs := f.waitEvents(t, trades.TypeImportFailed, 3)
	evs = f.waitEvents(t, trades.TypeImportCompleted, 1)

	done := ofType[trades.ImportCompleted](t, evs, trades.TypeImportCompleted)
	if len(done) != 1 || done[0].ImportID != good.ImportID() || done[0].Stored != 25 || done[0].Pages != 3 {
		t.Fatalf("import.completed %+v, want good's 25 trades in 3 pages", done)
	}
	if n := f.rowCount(t, "good"); n != 25 {
		t.Fatalf("good has %d rows, want 25", n)
	}
	failed := map[string]trades.ImportFailed{}
	for _, p := range ofType[trades.ImportFailed](t, evs, trades.TypeImportFailed) {
		failed[p.ImportID] = p
	}
	want := map[string]string{revoked.ImportID(): trades.RuleBrokerAuth, inactive.ImportID(): trades.RuleBrokerConnection, none.ImportID(): trades.RuleBrokerConnection}
	for id, rule := range want {
		if p := failed[id]; p.Rule != rule || p.Reason != "sanity_fail" || p.RunID == "" {
			t.Fatalf("import.failed of %s: %+v, want sanity_fail %s", id, p, rule)
		}
		if st := f.state(t, id); st.Status != trades.StatusFailed || st.Rule != rule {
			t.Fatalf("state of %s: %+v", id, st)
		}
	}
	rules := map[string]string{}
	for _, r := range f.waitDLQ(t, 3) {
		if header(r, "dlq.stage") != trades.ImportName || header(r, "dlq.reason") != "sanity_fail" {
			t.Fatalf("dead letter headers %v", r.Headers)
		}
		rules[string(r.Key)] = header(r, "dlq.rule")
	}
	if rules["revoked"] != trades.RuleBrokerAuth || rules["inactive"] != trades.RuleBrokerConnection || rules["nobody"] != trades.RuleBrokerConnection {
		t.Fatalf("dead letter rules by user %v", rules)
	}
	if got := f.metric(t, "sluice_trades_vendor_429_total", "source", "broker"); got != 1 {
		t.Fatalf("vendor_429_total %v, want 1", got)
	}
	if logs := f.logs.String(); strings.Contains(logs, "tok-good-6c1f") || strings.Contains(logs, "tok-revoked-99aa") {
		t.Fatal("a broker token appears in the service's log")
	}
}

// revokingAdapter deactivates the user's connection during its first
// fetch, then serves like inner.
type revokingAdapter struct {
	inner trades.BrokerAdapter
	f     *importFixture
	t     *testing.T
	once  sync.Once
}

func (a *revokingAdapter) FetchTrades(ctx context.Context, req trades.FetchRequest) (trades.Page, error) {
	a.once.Do(func() {
		if _, err := a.f.pg.Pool.Exec(ctx, `UPDATE broker_connections SET active = false WHERE user_id = $1`, req.UserID); err != nil {
			a.t.Error(err)
		}
	})
	return a.inner.FetchTrades(ctx, req)
}

// A connection deactivated during a run fails the run at its next page,
// at once (no retries): import.failed {sanity_fail,
// trades.broker_connection}; the pages stored before stay.
func TestConnectionLostMidRun(t *testing.T) {
	t.Parallel()
	key, err := trades.ParseTokenKey(testTokenKey)
	if err != nil {
		t.Fatal(err)
	}
	_, srv := newFakeCoinbase(t, "tok-mid", 25)
	cb := trades.NewCoinbase(srv.URL, srv.Client())
	cb.Limit = 10
	adapter := &revokingAdapter{inner: cb, t: t}
	f := newImportFixture(t, false, func(c *trades.ImportConfig) {
		c.TokenKey = key
		c.Adapters = map[string]trades.BrokerAdapter{trades.BrokerCoinbase: adapter}
	})
	adapter.f = f
	f.connect(t, key, "mid", trades.BrokerCoinbase, "tok-mid", true)
	f.start(t)
	cmd := importCmd("mid", since, trades.BrokerCoinbase, false, nil)
	f.send(t, "mid", cmd)
	evs := f.waitEvents(t, trades.TypeImportFailed, 1)
	failed := ofType[trades.ImportFailed](t, evs, trades.TypeImportFailed)
	if failed[0].Rule != trades.RuleBrokerConnection || failed[0].Reason != "sanity_fail" {
		t.Fatalf("import.failed %+v", failed[0])
	}
	if st := f.state(t, cmd.ImportID()); st.Status != trades.StatusFailed || st.Page != 1 || st.Stored != 10 {
		t.Fatalf("state %+v, want FAILED after page 1", st)
	}
	if got := f.metric(t, "sluice_trades_import_pages_total", "broker", "coinbase", "result", "retried"); got != 0 {
		t.Fatalf("%v retries, want none", got)
	}
}

// always429 answers every fetch with a 429 and a short Retry-After.
type always429 struct{}

func (always429) FetchTrades(context.Context, trades.FetchRequest) (trades.Page, error) {
	return trades.Page{}, &trades.BrokerError{Status: 429, RetryAfter: 20 * time.Millisecond}
}

// 429 waits are bounded per page (MaxPageWait): past the bound the run
// fails as retries_exhausted with rule trades.broker_fetch, though no
// attempt was spent.
func TestRateLimitWaitBounded(t *testing.T) {
	t.Parallel()
	f := newImportFixture(t, false, func(c *trades.ImportConfig) {
		c.Adapters = map[string]trades.BrokerAdapter{trades.BrokerSynthetic: always429{}}
		c.MaxPageWait = 200 * time.Millisecond
		c.RateLimitSafety = time.Millisecond
	})
	f.start(t)
	cmd := importCmd("slow", since, trades.BrokerSynthetic, false, nil)
	f.send(t, "slow", cmd)
	evs := f.waitEvents(t, trades.TypeImportFailed, 1)
	failed := ofType[trades.ImportFailed](t, evs, trades.TypeImportFailed)
	if failed[0].Reason != "retries_exhausted" || failed[0].Rule != trades.RuleBrokerFetch {
		t.Fatalf("import.failed %+v", failed[0])
	}
	dl := f.waitDLQ(t, 1)
	if header(dl[0], "dlq.attempts") != "1" || header(dl[0], "dlq.rule") != trades.RuleBrokerFetch {
		t.Fatalf("dead letter headers %v", dl[0].Headers)
	}
	if got := f.metric(t, "sluice_trades_vendor_429_total", "source", "broker"); got < 2 {
		t.Fatalf("vendor_429_total %v, want several", got)
	}
}

// Without BROKER_TOKEN_KEY a coinbase import stops the service (fatal)
// instead of dead-lettering the command, which stays uncommitted.
func TestCoinbaseImportWithoutTokenKeyIsFatal(t *testing.T) {
	t.Parallel()
	f := newImportFixture(t, false, nil)
	env := pipelines.Env{Kafka: f.k.Opts(t), DB: f.pg.Pool, Registerer: f.reg, Logger: slog.New(slog.NewTextHandler(f.logs, nil))}
	svcs, err := trades.ImportServices(env, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, "nokey", importCmd("nokey", since, trades.BrokerCoinbase, false, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = svcs[0].Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "BROKER_TOKEN_KEY") || ctx.Err() != nil {
		t.Fatalf("Run returned %v, want a fatal error naming BROKER_TOKEN_KEY", err)
	}
	if n := len(f.k.ReadTopic(t, f.cfg.DLQTopic, testkit.ReadCommitted())); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}
