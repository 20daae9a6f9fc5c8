package ratelimit_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/ratelimit"
)

// switchable is a redis.Scripter whose script calls go to the real server
// until down is set; then they go to down (a server that refuses
// connections or never answers), as after a Redis crash or a network
// partition.
type switchable struct {
	redis.Scripter
	mu   sync.Mutex
	down redis.Scripter
}

func (s *switchable) set(down redis.Scripter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func (s *switchable) cur() redis.Scripter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down != nil {
		return s.down
	}
	return s.Scripter
}

func (s *switchable) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return s.cur().EvalSha(ctx, sha, keys, args...)
}

func (s *switchable) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return s.cur().Eval(ctx, src, keys, args...)
}

// refusingClient returns a client of an address where nothing listens.
func refusingClient(t *testing.T) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// hungClient returns a client of a server that accepts connections and
// never answers; its read timeout is long (as a client configured for slow
// networks would have).
func hungClient(t *testing.T) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ReadTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second})
	t.Cleanup(func() {
		_ = c.Close()
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return c
}

// A Redis outage mid-run is a transient condition of the stage: no grant
// (next is not called), a retry after a wait that grows with consecutive
// failures (never a busy retry), and an error that wraps ErrDenied and
// ErrUnavailable so that callers which budget real failures (the ticks
// worker fails a job after a few) do not count it as one. When Redis is
// back, the same message is granted.
func TestStageRedisOutageIsTransient(t *testing.T) {
	t.Parallel()
	r := realRedis(t)
	sw := &switchable{Scripter: r.Client}
	reg := prometheus.NewRegistry()
	l, err := ratelimit.New(context.Background(), sw, ratelimit.Config{Source: "ib", KeyPrefix: r.Prefix,
		Windows: []ratelimit.Window{{Size: time.Minute, Limit: 100}}}, reg)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	next := func(_ context.Context, m stages.Msg[string]) ([]string, error) {
		calls.Add(1)
		return []string{m.Value}, nil
	}
	b := ratelimit.Backoff{Initial: 20 * time.Millisecond, Max: 80 * time.Millisecond}
	st := ratelimit.Stage(l, func(m stages.Msg[string]) (string, bool) { return m.Key, true }, b, next)
	ctx := testkit.Context(t)
	msg := stages.Msg[string]{Key: "A", Value: "a1"}

	sw.set(refusingClient(t))
	var afters []time.Duration
	for i := range 5 {
		_, err := st(ctx, msg)
		c := stages.Classify(err)
		if c == nil || c.Kind != stages.KindWait {
			t.Fatalf("call %d during the outage returned %v, want a stages.Wait", i, err)
		}
		if !errors.Is(err, ratelimit.ErrDenied) || !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Errorf("call %d: %v does not wrap ErrDenied and ErrUnavailable", i, err)
		}
		afters = append(afters, c.After)
	}
	if calls.Load() != 0 {
		t.Fatalf("next called %d times while Redis was down", calls.Load())
	}
	// Lower bounds only: the n-th failure waits at least min(20ms·2^(n−1), 80ms).
	for i, want := range []time.Duration{20, 40, 80, 80, 80} {
		if afters[i] < want*time.Millisecond {
			t.Errorf("wait after failure %d = %s, want ≥ %s (waits %v)", i+1, afters[i], want*time.Millisecond, afters)
		}
	}
	if got := testkit.Metric(t, reg, "sluice_ratelimit_errors_total", "source", "ib"); got != 5 {
		t.Errorf("errors counter %v, want 5", got)
	}

	sw.set(nil)
	if out, err := st(ctx, msg); err != nil || len(out) != 1 {
		t.Fatalf("after Redis is back: %v, %v; want the message granted", out, err)
	}
	// The failure streak ended: a new outage starts from the initial wait again.
	sw.set(refusingClient(t))
	_, err = st(ctx, msg)
	if c := stages.Classify(err); c == nil || c.After > 2*b.Initial+10*time.Millisecond {
		t.Errorf("first failure of a new outage waits %v, want ≤ 2×Initial", c)
	}
}

// Allow returns when its context ends even if the server never answers
// (a hung or partitioned Redis), instead of after the client's read
// timeout.
func TestAllowReturnsWhenContextEnds(t *testing.T) {
	t.Parallel()
	r := realRedis(t)
	sw := &switchable{Scripter: r.Client}
	l, err := ratelimit.New(context.Background(), sw, ratelimit.Config{Source: "ib", KeyPrefix: r.Prefix}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sw.set(hungClient(t))
	ctx, cancel := context.WithTimeout(testkit.Context(t), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err = l.Allow(ctx, "A")
	took := time.Since(t0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Allow on a hung server = %v, want context.DeadlineExceeded", err)
	}
	if took > 5*time.Second {
		t.Errorf("Allow returned %s after its context ended (client read timeout 20s)", took)
	}
	// A cancelled context is reported at once too.
	cctx, ccancel := context.WithCancel(testkit.Context(t))
	ccancel()
	if _, err := l.Allow(cctx, "A"); !errors.Is(err, context.Canceled) {
		t.Errorf("Allow with a cancelled context = %v, want context.Canceled", err)
	}
}

// Several processes (one client each) with several goroutines each share
// one budget: no window ever holds more grants than its limit, counted
// by the server times of the grants.
func TestConcurrentClientsNoOverAdmission(t *testing.T) {
	t.Parallel()
	r := realRedis(t)
	opts := r.Client.Options()
	ws := []ratelimit.Window{{Size: 2 * time.Second, Limit: 8}, {Size: 400 * time.Millisecond, Limit: 3}}
	ctx := testkit.Context(t)
	deadline := time.Now().Add(3 * time.Second)
	var mu sync.Mutex
	var grants []time.Time
	var wg sync.WaitGroup
	for range 4 {
		c := redis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		l, err := ratelimit.New(ctx, c, ratelimit.Config{Source: "ib", KeyPrefix: r.Prefix, Windows: ws}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ws = l.Windows()
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					d, err := l.Allow(ctx, "shared")
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						grants = append(grants, d.At)
						mu.Unlock()
						continue
					}
					time.Sleep(min(d.Wait, time.Until(deadline)))
				}
			}()
		}
	}
	wg.Wait()
	if len(grants) < 8 {
		t.Fatalf("%d grants in 3s, want at least the 2s window's 8", len(grants))
	}
	checkWindows(t, "shared", slices.Clone(grants), ws)
}
