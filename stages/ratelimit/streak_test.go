package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/ratelimit"
)

// fakeScripter stands in for Redis: it loads any script and answers every
// limiter call with a denial that asks for a wait of one second, except for
// the accounts in grant, which are granted.
type fakeScripter struct {
	redis.Scripter // nil: only the methods below are called
	mu             sync.Mutex
	grant          map[string]bool
}

func (f *fakeScripter) ScriptLoad(_ context.Context, _ string) *redis.StringCmd {
	return redis.NewStringResult("fakesha", nil)
}

func (f *fakeScripter) EvalSha(_ context.Context, _ string, keys []string, _ ...any) *redis.Cmd {
	// keys[0] is "rate_limit:SOURCE:KIND:{ACCOUNT}:WINDOW".
	parts := strings.Split(keys[0], ":")
	account := strings.Trim(parts[len(parts)-2], "{}")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.grant[account] {
		return redis.NewCmdResult([]any{int64(1), int64(0), int64(1), "g", int64(0)}, nil)
	}
	return redis.NewCmdResult([]any{int64(0), int64(time.Second / time.Microsecond), int64(1), "g", int64(0)}, nil)
}

func (f *fakeScripter) Eval(ctx context.Context, _ string, keys []string, args ...any) *redis.Cmd {
	return f.EvalSha(ctx, "", keys, args...)
}

var denialN = regexp.MustCompile(`\(denial (\d+)\)`)

// deny calls st with a message of account, expects a denial and returns
// its streak number n and wait.
func deny(t *testing.T, st stages.Func[string, string], account string) (int, time.Duration) {
	t.Helper()
	_, err := st(context.Background(), stages.Msg[string]{Key: account, Value: account})
	c := stages.Classify(err)
	if c == nil || c.Kind != stages.KindWait || !errors.Is(err, ratelimit.ErrDenied) {
		t.Fatalf("%s: %v, want a stages.Wait with ErrDenied", account, err)
	}
	m := denialN.FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("%s: %v carries no denial number", account, err)
	}
	n, _ := strconv.Atoi(m[1])
	return n, c.After
}

// The stage's per-account denial streaks are bounded by the accounts denied
// recently: many accounts that are denied once and never retried (their
// messages dead-lettered, their partitions revoked) are forgotten after
// the horizon, while an account that keeps being retried keeps its streak
// and its backoff grows exactly as before.
func TestStageForgetsIdleDenialStreaks(t *testing.T) {
	t.Parallel()
	fake := &fakeScripter{grant: map[string]bool{}}
	l, err := ratelimit.New(context.Background(), fake, ratelimit.Config{Source: "ib",
		Windows: []ratelimit.Window{{Size: time.Minute, Limit: 1}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := ratelimit.Backoff{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	h := ratelimit.ForgetAfter(l, b)
	if want := 2 * (time.Minute + 80*time.Millisecond); h != want {
		t.Fatalf("horizon %s, want 2·(largest window + Max) = %s", h, want)
	}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	var calls int
	next := func(_ context.Context, m stages.Msg[string]) ([]string, error) {
		calls++
		return []string{m.Value}, nil
	}
	st, size := ratelimit.StageWithClock(l, func(m stages.Msg[string]) (string, bool) { return m.Key, true }, b, next,
		func() time.Time { return now })

	// Every step: the hot account is retried after its wait plus a slow
	// runtime's delay of h/4 (still within the horizon) and 50 new accounts
	// are denied once and never seen again.
	const perStep = 50
	var batches []time.Time // time of every batch of cold accounts
	cold := 0
	for step := range 60 {
		n, wait := deny(t, st, "hot")
		if n != step+1 {
			t.Fatalf("step %d: hot account at denial %d, want %d (its streak must continue)", step, n, step+1)
		}
		extra := min(b.Initial<<min(n-1, 10), b.Max)
		if wait < time.Second || wait > time.Second+extra {
			t.Fatalf("denial %d of the hot account waits %s, want within [1s, 1s+%s]", n, wait, extra)
		}
		for range perStep {
			cold++
			if n, _ := deny(t, st, fmt.Sprintf("cold%d", cold)); n != 1 {
				t.Fatalf("new account cold%d at denial %d, want 1", cold, n)
			}
		}
		batches = append(batches, now)
		// Bounds: every account denied within the horizon is remembered;
		// none idle for more than 1.5 horizons is.
		lo, hi := 1, 1
		for _, at := range batches {
			if now.Sub(at) <= h {
				lo += perStep
			}
			if now.Sub(at) <= h+h/2 {
				hi += perStep
			}
		}
		if got := size(); got < lo || got > hi {
			t.Fatalf("step %d (%s after the start, %d accounts denied): %d streaks remembered, want within [%d, %d]",
				step, now.Sub(batches[0]), cold+1, got, lo, hi)
		}
		now = now.Add(wait + h/4)
	}
	if cold != 3000 || size() > 1+7*perStep {
		t.Fatalf("%d cold accounts, %d streaks remembered", cold, size())
	}

	// Only the hot account stays active for two horizons: the rest go.
	for end := now.Add(2 * h); now.Before(end); {
		_, wait := deny(t, st, "hot")
		now = now.Add(wait)
	}
	if got := size(); got != 1 {
		t.Errorf("after two horizons with only the hot account denied, %d streaks remembered, want 1", got)
	}
	// Granted: its streak ends.
	fake.mu.Lock()
	fake.grant["hot"] = true
	fake.mu.Unlock()
	if out, err := st(context.Background(), stages.Msg[string]{Key: "hot", Value: "v"}); err != nil || len(out) != 1 || calls != 1 {
		t.Fatalf("granted call: %v, %v (next called %d times)", out, err, calls)
	}
	if got := size(); got != 0 {
		t.Errorf("after the grant, %d streaks remembered, want 0", got)
	}

	// An account idle for less than the horizon continues its streak; one
	// idle for longer starts a new one.
	for want := 1; want <= 3; want++ {
		if n, _ := deny(t, st, "sleepy"); n != want {
			t.Fatalf("sleepy at denial %d, want %d", n, want)
		}
		now = now.Add(h - time.Millisecond)
	}
	now = now.Add(2 * time.Millisecond) // idle h+1ms since the last denial
	if n, _ := deny(t, st, "sleepy"); n != 1 {
		t.Errorf("after being idle longer than the horizon, sleepy at denial %d, want a new streak (1)", n)
	}
}
