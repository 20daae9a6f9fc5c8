package modules

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/stages/ratelimit"
	"github.com/sluicehq/sluice/stages/run"
)

// memberEnv, when set, turns the test binary into a modules member
// process configured by the JSON memberSpec in its value (see TestMain).
const memberEnv = "SLUICE_MODULES_TEST_MEMBER"

// TestMain lets the test binary run as a member of the modules groups in a
// child process, so that a member can be killed with SIGKILL.
func TestMain(m *testing.M) {
	testkit.RunChild(memberEnv, childMember)
	os.Exit(testkit.MainWithPostgres(m)) // one local PostgreSQL for the binary when DATABASE_URL is unset
}

// memberSpec is what a member process needs. It holds credentials (the
// database and Redis URLs): never log it.
type memberSpec struct {
	Brokers                            []string
	DBURL, RedisURL, RedisPrefix       string
	RefreshTopic, StateTopic, DLQTopic string
	RefreshGroup, MirrorGroup          string
	MemberID                           string
	Latency                            time.Duration
	// HangAfter > 0: every upstream call after the first HangAfter hangs
	// until its context ends.
	HangAfter int
}

func (f *svcFixture) memberSpec(id string, latency time.Duration) memberSpec {
	return memberSpec{
		Brokers: f.k.Brokers, DBURL: f.pgURL, RedisURL: f.redis.URL, RedisPrefix: f.redis.Prefix,
		RefreshTopic: f.cfg.RefreshTopic, StateTopic: f.cfg.StateTopic, DLQTopic: f.cfg.DLQTopic,
		RefreshGroup: f.cfg.RefreshGroup, MirrorGroup: f.cfg.MirrorGroup, MemberID: id, Latency: latency,
	}
}

// childMember runs both services until it is killed or signalled.
func childMember(raw string) int {
	var s memberSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "member spec:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, s.DBURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "database:", err)
		return 2
	}
	defer pool.Close()
	ropts, err := redis.ParseURL(s.RedisURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis URL does not parse")
		return 2
	}
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	env := pipelines.Env{
		Kafka: append([]kgo.Opt{kgo.SeedBrokers(s.Brokers...)}, killOpts()...),
		DB:    pool, Redis: rdb, Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	src := newCountingSource(NewSynthetic(SyntheticConfig{Latency: s.Latency}))
	var calls atomic.Int64
	src.hook = func(ctx context.Context, _ string, _ int) (Snapshot, error, bool) {
		if s.HangAfter > 0 && calls.Add(1) > int64(s.HangAfter) {
			<-ctx.Done()
			return Snapshot{}, ctx.Err(), true
		}
		return Snapshot{}, nil, false
	}
	svcs, err := Services(env, Config{
		RefreshTopic: s.RefreshTopic, StateTopic: s.StateTopic, DLQTopic: s.DLQTopic,
		RefreshGroup: s.RefreshGroup, MirrorGroup: s.MirrorGroup, MemberID: s.MemberID,
		Source:    src,
		RateLimit: RateLimitConfig{Windows: []ratelimit.Window{{Size: time.Second, Limit: 1000}}, KeyPrefix: s.RedisPrefix},
		Runtime:   run.Config{BatchLinger: 5 * time.Millisecond, CommitInterval: 100 * time.Millisecond},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "services:", err)
		return 2
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, svc := range svcs {
		g.Go(func() error { return svc.Run(gctx) })
	}
	if err := g.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	return 0
}

// killOpts are the client options of both members of the kill test: a
// killed member leaves its groups after 6 s.
func killOpts() []kgo.Opt {
	return []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond), kgo.FetchMaxWait(100 * time.Millisecond)}
}

// needsRealStack skips the test unless Kafka, PostgreSQL and Redis are
// given by the environment.
func needsRealStack(t *testing.T) {
	t.Helper()
	for _, v := range []string{"KAFKA_BROKERS", "DATABASE_URL", "REDIS_URL"} {
		if os.Getenv(v) == "" {
			t.Skipf("real stack test: %s is not set", v)
		}
	}
}

// Fifty requests of one key within a second, on the real stack with the
// default rate limit, cost exactly one upstream call.
func TestRealStackStampede(t *testing.T) {
	needsRealStack(t)
	t.Parallel()
	f := newSvcFixture(t, nil, func(c *Config) { c.RateLimit.Windows = nil })
	f.start(t)
	const n = 50
	for range n {
		f.produce(t, &kgo.Record{Key: []byte("STMP:options_flow"), Value: request("STMP", ModuleOptionsFlow)})
		time.Sleep(15 * time.Millisecond)
	}
	f.waitRequests(t, n)
	if c := f.src.Calls("STMP:options_flow"); c != 1 {
		t.Errorf("upstream calls = %d, want 1", c)
	}
	if got := f.metric(t, "requests_total", "outcome", "skipped_fresh"); got != n-1 {
		t.Errorf("skipped_fresh = %v, want %d", got, n-1)
	}
	f.waitRow(t, "STMP", ModuleOptionsFlow, "row ready", func(r row) bool { return r.status == "ready" })
}

// Two members, one killed (SIGKILL) in the middle of the run: every key
// ends ready, and the upstream calls — counted as leases, one per call
// attempt, an upper bound — are at most the keys plus the keys of the
// partitions the killed member held.
func TestRealStackMemberKilled(t *testing.T) {
	needsRealStack(t)
	t.Parallel()
	f := newSvcFixture(t, nil, nil)
	f.env.Kafka = append(f.k.Opts(t), killOpts()...)
	const keys = 24
	latency := 150 * time.Millisecond
	f.src.hook = func(ctx context.Context, _ string, _ int) (Snapshot, error, bool) {
		select {
		case <-time.After(latency):
		case <-ctx.Done():
			return Snapshot{}, ctx.Err(), true
		}
		return Snapshot{}, nil, false
	}
	var recs []*kgo.Record
	for i := range keys {
		tk := fmt.Sprintf("K%02d", i)
		recs = append(recs, &kgo.Record{Key: []byte(tk + ":options_flow"), Value: request(tk, ModuleOptionsFlow)})
	}
	// Both members join before the requests arrive, so the killed one holds
	// only its share of the partitions.
	f.start(t)
	spec := f.memberSpec("killed", latency)
	spec.HangAfter = 1 // killed in the middle of its second refresh
	child := testkit.StartChild(t, memberEnv, spec)
	adm := f.k.Admin(t)
	testkit.WaitFor(t, 60*time.Second, "two members in the refresh group", func() bool {
		gs, err := adm.DescribeGroups(f.ctx, f.cfg.RefreshGroup)
		if err != nil {
			return false
		}
		g, ok := gs[f.cfg.RefreshGroup]
		return ok && g.State == "Stable" && len(g.Members) == 2
	})
	// leasedBy returns the partitions where owner took a lease, and the
	// keys it leased.
	leasedBy := func(owner string) (map[int32]bool, map[string]bool) {
		parts, keys := map[int32]bool{}, map[string]bool{}
		for _, r := range f.k.ReadTopic(t, f.cfg.StateTopic) {
			s, err := DecodeState(r.Key, r.Value)
			if err == nil && s.Lease != nil && s.Lease.Owner == owner {
				parts[r.Partition], keys[s.Key()] = true, true
			}
		}
		return parts, keys
	}
	f.produce(t, recs...)
	testkit.WaitFor(t, 60*time.Second, "the child's second lease", func() bool {
		_, keys := leasedBy("killed")
		return len(keys) >= 2
	})
	child.Kill(t)

	for i := range keys {
		f.waitRow(t, fmt.Sprintf("K%02d", i), ModuleOptionsFlow, "every key ready", func(r row) bool { return r.status == "ready" })
	}
	killedParts, _ := leasedBy("killed")
	inKilled, leases := 0, 0
	for _, r := range recs {
		p := int32(kgo.StickyKeyPartitioner(nil).ForTopic(f.cfg.RefreshTopic).Partition(r, 3))
		if killedParts[p] {
			inKilled++
		}
	}
	for _, r := range f.k.ReadTopic(t, f.cfg.StateTopic) {
		if s, err := DecodeState(r.Key, r.Value); err == nil && s.Status == StatusRefreshing {
			leases++
		}
	}
	if leases > keys+inKilled {
		t.Errorf("%d upstream call attempts (leases) for %d keys, %d of them in the killed member's partitions %v", leases, keys, inKilled, killedParts)
	}
	if got := f.metric(t, "takeovers_total"); got < 1 {
		t.Errorf("takeovers_total = %v, want the killed member's unfinished refresh taken over", got)
	}
	t.Logf("%d leases for %d keys (%d in the killed member's partitions %v)", leases, keys, inKilled, killedParts)
}
