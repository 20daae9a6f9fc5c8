package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/ratelimit"
)

// realRedis returns a real Redis server: miniredis is not faithful for the
// server clock (TIME) and Lua timing this package relies on.
func realRedis(t testing.TB) *testkit.Redis {
	t.Helper()
	r := testkit.NewRedis(t)
	testkit.RequireReal(t, r)
	return r
}

func newLimiter(t testing.TB, r *testkit.Redis, reg prometheus.Registerer, ws ...ratelimit.Window) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(context.Background(), r.Client, ratelimit.Config{Source: "ib", Windows: ws, KeyPrefix: r.Prefix}, reg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestWindowName(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{10 * time.Minute, "10m"}, {time.Minute, "1m"}, {time.Second, "1s"}, {2 * time.Hour, "2h"},
		{90 * time.Minute, "90m"}, {1500 * time.Millisecond, "1500ms"}, {90 * time.Second, "90s"},
	} {
		if got := ratelimit.WindowName(tc.d); got != tc.want {
			t.Errorf("WindowName(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestConfigRejected(t *testing.T) {
	r := testkit.NewRedis(t, testkit.FakeOK())
	for name, cfg := range map[string]ratelimit.Config{
		"no source":      {},
		"colon source":   {Source: "a:b"},
		"zero limit":     {Source: "ib", Windows: []ratelimit.Window{{Size: time.Second}}},
		"tiny window":    {Source: "ib", Windows: []ratelimit.Window{{Size: time.Microsecond, Limit: 1}}},
		"duplicate name": {Source: "ib", Windows: []ratelimit.Window{{Size: time.Second, Limit: 1}, {Size: 1000 * time.Millisecond, Limit: 2}}},
	} {
		if _, err := ratelimit.New(context.Background(), r.Client, cfg, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDefaultKeysAndTTL(t *testing.T) {
	t.Parallel()
	r := realRedis(t)
	l := newLimiter(t, r, nil)
	want := []string{r.Prefix + "rate_limit:ib:historical:{U12345}:10m", r.Prefix + "rate_limit:ib:historical:{U12345}:1m", r.Prefix + "rate_limit:ib:historical:{U12345}:1s"}
	if got := l.Keys("U12345"); !slices.Equal(got, want) {
		t.Fatalf("Keys = %v, want %v", got, want)
	}
	ctx := testkit.Context(t)
	d, err := l.Allow(ctx, "U12345")
	if err != nil || !d.Allowed {
		t.Fatalf("first Allow = %+v, %v", d, err)
	}
	for i, k := range want {
		ttl, err := r.Client.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		max := l.Windows()[i].Size + time.Second
		if ttl <= 0 || ttl > max {
			t.Errorf("%s TTL %s, want within (0, %s]", k, ttl, max)
		}
		members, err := r.Client.ZRangeWithScores(ctx, k, 0, -1).Result()
		if err != nil || len(members) != 1 {
			t.Fatalf("%s members %v, %v", k, members, err)
		}
		if got := int64(members[0].Score); got != d.At.UnixMicro() {
			t.Errorf("%s score %d, want server time %d", k, got, d.At.UnixMicro())
		}
	}
	if skew := time.Since(d.At); skew < -time.Second || skew > time.Second {
		t.Errorf("server time %s is %s away from local time", d.At, skew)
	}
}

// The smallest full window binds, denials record nothing, and the wait is
// the time until the binding window's oldest member leaves.
func TestDenyWaitsForBindingWindow(t *testing.T) {
	t.Parallel()
	r := realRedis(t)
	reg := prometheus.NewRegistry()
	l := newLimiter(t, r, reg, ratelimit.Window{Size: 300 * time.Millisecond, Limit: 2}, ratelimit.Window{Size: 3 * time.Second, Limit: 3})
	ctx := testkit.Context(t)
	var grants []time.Time
	allow := func() ratelimit.Decision {
		t.Helper()
		d, err := l.Allow(ctx, "acct")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			grants = append(grants, d.At)
		}
		return d
	}
	allow()
	allow()
	d := allow() // the 300ms window is full
	if d.Allowed || d.Wait <= 0 || d.Wait > 300*time.Millisecond {
		t.Fatalf("third call = %+v, want a denial with a wait in (0, 300ms]", d)
	}
	if want := grants[0].Add(300 * time.Millisecond).Sub(d.At); d.Wait != want {
		t.Errorf("wait %s, want %s (oldest grant + window − now)", d.Wait, want)
	}
	n, _ := r.Client.ZCard(ctx, l.Keys("acct")[0]).Result()
	if n != 2 {
		t.Errorf("after a denial the window holds %d members, want 2", n)
	}
	time.Sleep(d.Wait)
	if d := allow(); !d.Allowed {
		t.Fatalf("after the wait: %+v, want allowed", d)
	}
	time.Sleep(300 * time.Millisecond)
	d = allow() // now the 3s window (3 grants) binds
	if d.Allowed {
		t.Fatal("fourth grant within 3s allowed")
	}
	if want := grants[0].Add(3 * time.Second).Sub(d.At); d.Wait != want {
		t.Errorf("wait %s, want %s from the 3s window", d.Wait, want)
	}
	if got := testkit.Metric(t, reg, "sluice_ratelimit_decisions_total", "decision", "allowed"); got != 3 {
		t.Errorf("allowed counter %v, want 3", got)
	}
	if got := testkit.Metric(t, reg, "sluice_ratelimit_decisions_total", "decision", "denied"); got != 2 {
		t.Errorf("denied counter %v, want 2", got)
	}
}

// After the server lost its script cache, EVALSHA fails with NOSCRIPT and
// the call falls back to EVAL.
func TestNoScriptFallback(t *testing.T) {
	t.Parallel()
	r := realRedis(t)
	l := newLimiter(t, r, nil, ratelimit.Window{Size: time.Minute, Limit: 5})
	ctx := testkit.Context(t)
	if err := r.Client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d, err := l.Allow(ctx, "acct")
		if err != nil || !d.Allowed {
			t.Fatalf("call %d after SCRIPT FLUSH = %+v, %v", i, d, err)
		}
	}
	n, _ := r.Client.ZCard(ctx, l.Keys("acct")[0]).Result()
	if n != 3 {
		t.Errorf("window holds %d grants, want 3", n)
	}
}

func TestStageDeniesWithWait(t *testing.T) {
	t.Parallel()
	r := realRedis(t)
	l := newLimiter(t, r, nil, ratelimit.Window{Size: 2 * time.Second, Limit: 1})
	var calls []string
	var mu sync.Mutex
	next := func(_ context.Context, m stages.Msg[string]) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, m.Value)
		return []string{m.Value}, nil
	}
	key := func(m stages.Msg[string]) (string, bool) { return m.Key, m.Key != "" }
	st := ratelimit.Stage(l, key, ratelimit.Backoff{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond}, next)
	ctx := testkit.Context(t)
	if out, err := st(ctx, stages.Msg[string]{Key: "A", Value: "a1"}); err != nil || len(out) != 1 {
		t.Fatalf("first = %v, %v", out, err)
	}
	var waits []time.Duration
	for range 4 {
		_, err := st(ctx, stages.Msg[string]{Key: "A", Value: "a2"})
		c := stages.Classify(err)
		if c == nil || c.Kind != stages.KindWait || !errors.Is(err, ratelimit.ErrDenied) {
			t.Fatalf("denied call returned %v, want a stages.Wait with ErrDenied", err)
		}
		if c.After < 1500*time.Millisecond || c.After > 2*time.Second+40*time.Millisecond {
			t.Errorf("Wait %s, want the ~2s limiter wait plus ≤ 40ms jitter", c.After)
		}
		waits = append(waits, c.After)
	}
	// Another account has its own budget; unlimited messages pass.
	if _, err := st(ctx, stages.Msg[string]{Key: "B", Value: "b1"}); err != nil {
		t.Fatalf("account B: %v", err)
	}
	for range 3 {
		if _, err := st(ctx, stages.Msg[string]{Value: "free"}); err != nil {
			t.Fatalf("unlimited message: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(calls) != "[a1 b1 free free free]" {
		t.Errorf("next called with %v, want [a1 b1 free free free]", calls)
	}
}

func TestBackoffGrowsAndNeverUndercuts(t *testing.T) {
	b := ratelimit.Backoff{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	for n, maxExtra := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 3: 40 * time.Millisecond, 4: 80 * time.Millisecond, 10: 80 * time.Millisecond} {
		var top time.Duration
		for range 2000 {
			w := b.Wait(time.Second, n)
			if w < time.Second || w > time.Second+maxExtra {
				t.Fatalf("n=%d: wait %s outside [1s, 1s+%s]", n, w, maxExtra)
			}
			top = max(top, w-time.Second)
		}
		if top < maxExtra/2 {
			t.Errorf("n=%d: largest extra %s, want jitter spread up to %s", n, top, maxExtra)
		}
	}
}

// greedyMax is the most grants any caller could get in [0, d): granting as
// early as every window allows is optimal for sliding-window limits.
func greedyMax(ws []ratelimit.Window, d time.Duration) int {
	var ts []time.Duration
	for {
		var next time.Duration
		k := len(ts)
		for _, w := range ws {
			if k >= w.Limit {
				next = max(next, ts[k-w.Limit]+w.Size)
			}
		}
		if next >= d {
			return len(ts)
		}
		ts = append(ts, next)
	}
}

// checkWindows fails when any interval of a window's size holds more than
// its limit: with sorted grants, the (L+1)-th grant after grant i must come
// at least one window after it.
func checkWindows(t *testing.T, who string, grants []time.Time, ws []ratelimit.Window) {
	t.Helper()
	slices.SortFunc(grants, func(a, b time.Time) int { return a.Compare(b) })
	for _, w := range ws {
		for i := 0; i+w.Limit < len(grants); i++ {
			if gap := grants[i+w.Limit].Sub(grants[i]); gap < w.Size {
				t.Errorf("%s: window %s holds %d grants between %s and %s (%s apart), limit %d",
					who, w.Name, w.Limit+1, grants[i].Format(time.StampMicro), grants[i+w.Limit].Format(time.StampMicro), gap, w.Limit)
				break
			}
		}
	}
}

func TestGreedyMax(t *testing.T) {
	ws := []ratelimit.Window{{Size: time.Second, Limit: 5}, {Size: time.Minute, Limit: 40}, {Size: 10 * time.Minute, Limit: 100}}
	for d, want := range map[time.Duration]int{time.Second: 5, 8 * time.Second: 40, 30 * time.Second: 40, 60 * time.Second: 40, 61 * time.Second: 45, 70 * time.Second: 80, 130 * time.Second: 100, 11 * time.Minute: 140} {
		if got := greedyMax(ws, d); got != want {
			t.Errorf("greedyMax(%s) = %d, want %d", d, got, want)
		}
	}
}

// Acceptance (issue 5): windows 1s:5, 1m:40, 10m:100; 8 concurrent callers
// of one account and 3 of another for 70s against a real Redis. No window
// ever holds more than its limit, each account has its own budget, and each
// reaches ≥ 95% of the theoretical maximum for the run's duration.
func TestAcceptanceMultiWindow70s(t *testing.T) {
	if testing.Short() {
		t.Skip("70s acceptance test skipped in -short mode")
	}
	t.Parallel()
	r := realRedis(t)
	t.Logf("using %s", r)
	ws := []ratelimit.Window{{Size: time.Second, Limit: 5}, {Size: time.Minute, Limit: 40}, {Size: 10 * time.Minute, Limit: 100}}
	l := newLimiter(t, r, nil, ws...)
	ws = l.Windows()
	const dur = 70 * time.Second
	ctx := testkit.ContextTimeout(t, dur+30*time.Second)
	start := time.Now()
	deadline := start.Add(dur)
	var mu sync.Mutex
	grants := map[string][]time.Time{}
	var errs []error
	var wg sync.WaitGroup
	caller := func(account string) {
		defer wg.Done()
		for {
			now := time.Now()
			if !now.Before(deadline) {
				return
			}
			d, err := l.Allow(ctx, account)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			if d.Allowed {
				mu.Lock()
				grants[account] = append(grants[account], d.At)
				mu.Unlock()
				continue
			}
			// Sleep the computed wait plus a little jitter, never past the end.
			sleep := d.Wait + time.Duration(rand.Int64N(int64(2*time.Millisecond)))
			if rest := time.Until(deadline); sleep > rest {
				sleep = rest
			}
			time.Sleep(sleep)
		}
	}
	for range 8 {
		wg.Add(1)
		go caller("U1")
	}
	for range 3 {
		wg.Add(1)
		go caller("U2")
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("limiter errors: %v", errs)
	}
	// The run may be a little longer than dur when the last calls were in
	// flight; the theoretical maximum is over the span of the run.
	span := time.Since(start)
	theo := greedyMax(ws, span)
	for _, acct := range []string{"U1", "U2"} {
		g := grants[acct]
		checkWindows(t, acct, g, ws)
		t.Logf("account %s: %d grants in %s, theoretical max %d (%.1f%%)", acct, len(g), span.Round(time.Millisecond), theo, 100*float64(len(g))/float64(theo))
		if float64(len(g)) < 0.95*float64(theo) {
			t.Errorf("account %s: %d grants, want ≥ 95%% of %d", acct, len(g), theo)
		}
		if len(g) > theo {
			t.Errorf("account %s: %d grants exceed the theoretical max %d", acct, len(g), theo)
		}
	}
	// Together the accounts exceed what one budget allows: isolation.
	if n := len(grants["U1"]) + len(grants["U2"]); n <= theo {
		t.Errorf("both accounts together got %d grants, want more than one budget (%d)", n, theo)
	}
}

// BenchmarkLimiterAllow measures limiter calls per second against a real
// Redis (windows large enough that every call is granted).
func BenchmarkLimiterAllow(b *testing.B) {
	r := realRedis(b)
	l := newLimiter(b, r, nil, ratelimit.Window{Size: 10 * time.Minute, Limit: 1 << 30}, ratelimit.Window{Size: time.Minute, Limit: 1 << 30}, ratelimit.Window{Size: time.Second, Limit: 1 << 30})
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		acct := fmt.Sprintf("bench-%d", rand.Int())
		for pb.Next() {
			if _, err := l.Allow(ctx, acct); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

// A huge Max (or Initial) never overflows the doubling into a negative or
// panicking wait: both are capped at MaxBackoff.
func TestBackoffHugeValuesCapped(t *testing.T) {
	for _, b := range []ratelimit.Backoff{
		{Initial: time.Millisecond, Max: 150 * 365 * 24 * time.Hour},
		{Initial: time.Millisecond, Max: time.Duration(math.MaxInt64)},
		{Initial: time.Duration(math.MaxInt64), Max: time.Duration(math.MaxInt64)},
	} {
		for _, n := range []int{1, 2, 40, 70, 100, 1000} {
			w := b.Wait(time.Second, n)
			f := b.FailureWait(n)
			if w < time.Second || w > time.Second+ratelimit.MaxBackoff || f < 0 || f > 2*ratelimit.MaxBackoff {
				t.Fatalf("%+v n=%d: wait %s, failure wait %s; want within [1s, 1s+%s] and [0, %s]", b, n, w, f, ratelimit.MaxBackoff, 2*ratelimit.MaxBackoff)
			}
		}
	}
}
