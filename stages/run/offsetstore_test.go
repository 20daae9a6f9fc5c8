package run_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// applied is one application of a record's effect: applications(v) =
// applications(v) + 1, not idempotent.
type applied struct{ V string }

// applicationsSink creates table applications in a fresh schema and returns
// a pgsink counting the applications of each record value, with opts.
func applicationsSink(t *testing.T, srv *testkit.PostgresServer, opts ...pgsink.Option) (*pgxpool.Pool, *pgsink.Sink[applied]) {
	t.Helper()
	pg := srv.Postgres(t)
	if _, err := pg.Pool.Exec(testkit.Context(t), "CREATE TABLE applications (v text PRIMARY KEY, n int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	s, err := pgsink.New(pg.Pool, pgsink.Table[applied]{
		Name: "applications", Columns: []string{"v", "n"}, Key: []string{"v"},
		Update: []pgsink.Set{{Column: "n", Expr: "t.n + EXCLUDED.n"}},
		KeyOf:  func(a applied) string { return a.V },
		Values: func(a applied) []any { return []any{a.V, 1} },
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return pg.Pool, s
}

// applyStage dead-letters poison records (see poisonStage) and applies
// every other record once.
func applyStage(ctx context.Context, m msg) ([]applied, error) {
	if _, err := poisonStage(ctx, m); err != nil {
		return nil, err
	}
	return []applied{{V: m.Value}}, nil
}

// applications returns how many times each value was applied.
func applications(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := pool.Query(testkit.Context(t), "SELECT v, n FROM applications")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	var v string
	var n int
	for rows.Next() {
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		out[v] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// refuseCommits makes kfake refuse every offset commit of the group (plain
// and transactional) while refuse is set, counting the refusals in refused.
func refuseCommits(k *testkit.Kafka, refuse *atomic.Bool, refused *atomic.Int32) {
	code := kerr.GroupAuthorizationFailed.Code
	for key, refusal := range map[kmsg.Key]func(kmsg.Request) kmsg.Response{
		kmsg.OffsetCommit: func(req kmsg.Request) kmsg.Response { return offsetCommitRefusal(req, code) },
		kmsg.TxnOffsetCommit: func(req kmsg.Request) kmsg.Response {
			return testkit.TxnOffsetCommitRefusal(req.(*kmsg.TxnOffsetCommitRequest), code)
		},
	} {
		k.Fake().ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
			k.Fake().KeepControl()
			if !refuse.Load() {
				return nil, nil, false
			}
			refused.Add(1)
			return refusal(req), nil, true
		})
	}
}

// checkApplied compares the applications of the non-poison values of recs
// with once (each exactly once) or, when once is false, requires that some
// were applied twice; every value must be applied at least once either way.
func checkApplied(t *testing.T, pool *pgxpool.Pool, recs []*kgo.Record, once bool) {
	t.Helper()
	got := applications(t, pool)
	twice := 0
	for _, r := range recs {
		v := string(r.Value)
		if strings.HasPrefix(v, "poison") {
			if got[v] != 0 {
				t.Errorf("poison record %s applied %d times", v, got[v])
			}
			continue
		}
		switch n := got[v]; {
		case n == 0:
			t.Errorf("record %s (%d@%d) never applied", v, r.Partition, r.Offset)
		case n > 1:
			twice++
			if once {
				t.Errorf("record %s (%d@%d) applied %d times", v, r.Partition, r.Offset, n)
			}
		}
	}
	if !once && twice == 0 {
		t.Errorf("without the offset store no record was applied twice: the test does not exercise redelivery")
	}
}

// A member whose Kafka offset commits all fail (a crash or a broker outage
// before its commit: the group's committed offsets stay where they were)
// leaves its records to the next member, which processes them again. With
// the sink's offsets in sluice_offsets (pgsink.WithOffsets and
// run.WithOffsetStore) each record's non-idempotent effect is applied
// exactly once and each poison record dead-lettered once; without them
// the records of the first are applied twice.
func TestOffsetStoreAfterUncommittedMember(t *testing.T) {
	t.Parallel()
	eachStoreMode(t, 3, func(t *testing.T, c *storeCase) {
		k, cfg, pool, sink, ropts, withStore := c.k, c.cfg, c.pool, c.sink, c.ropts, c.withStore
		cl, adm := k.Client(t), k.Admin(t)
		const n = 210
		recs := produce(t, cl, cfg.Topics[0], n/2, 10, poisonEvery)
		_, stop := start(t, k, cfg, applyStage, stages.Sink[applied](sink), ropts...)
		testkit.WaitFor(t, 30*time.Second, "the first half applied", func() bool { return len(applications(t, pool)) == n/2-poisonCount(n/2) })
		testkit.WaitFor(t, 30*time.Second, "commits refused", func() bool { return c.refused.Load() >= 2 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if c := testkit.Committed(t, adm, cfg.Group, cfg.Topics[0]); len(c) != 0 {
			t.Fatalf("committed %v although every commit was refused", c)
		}
		c.refuse.Store(false)
		// The second half, and a second member whose batches are
		// larger than the first's, so that one batch holds records
		// the first applied and records it never saw.
		recs = append(recs, produce(t, cl, cfg.Topics[0], n/2, 10, func(i int) string { return poisonEvery(n/2 + i) })...)
		cfg.BatchMaxRecords = 500
		_, stop = start(t, k, cfg, applyStage, stages.Sink[applied](sink), ropts...)
		testkit.WaitFor(t, 30*time.Second, "every offset committed", func() bool {
			return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		checkApplied(t, pool, recs, withStore)
		checkOnePerPoison(t, k, cfg.DLQTopic, recs)
	})
}

// Partitions moving between members whose Kafka commits fail (revokes
// commit nothing, so each new owner starts from the group's old commit):
// with the offset store every record is applied exactly once; without it
// the records of the moved partitions are applied again.
func TestOffsetStoreAcrossRebalances(t *testing.T) {
	t.Parallel()
	eachStoreMode(t, 4, func(t *testing.T, c *storeCase) {
		k, cfg, pool, sink, ropts, withStore := c.k, c.cfg, c.pool, c.sink, c.ropts, c.withStore
		cl, adm := k.Client(t), k.Admin(t)
		const n = 400
		recs := produce(t, cl, cfg.Topics[0], n/2, 10, poisonEvery)
		member := func(assigned *atomic.Bool) func() error {
			hook := run.WithAssignHook(func(context.Context, map[string][]int32) error { assigned.Store(true); return nil })
			_, stop := start(t, k, cfg, applyStage, stages.Sink[applied](sink), append(ropts, hook)...)
			return stop
		}
		var assignedA, assignedB atomic.Bool
		poison := poisonCount(n)
		stopA := member(&assignedA)
		testkit.WaitFor(t, 30*time.Second, "the first half applied by A", func() bool { return len(applications(t, pool)) == n/2-poisonCount(n/2) })
		stopB := member(&assignedB) // takes half of A's partitions, from the group's commit: none
		testkit.WaitFor(t, 30*time.Second, "B assigned partitions", assignedB.Load)
		// The second half, while A and B share the partitions.
		recs = append(recs, produce(t, cl, cfg.Topics[0], n/2, 10, func(i int) string { return poisonEvery(n/2 + i) })...)
		testkit.WaitFor(t, 30*time.Second, "every record applied", func() bool { return len(applications(t, pool)) == n-poison })
		if err := stopA(); err != nil { // B takes the rest
			t.Fatal(err)
		}
		c.refuse.Store(false)
		testkit.WaitFor(t, 60*time.Second, "every offset committed", func() bool {
			return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n
		})
		if err := stopB(); err != nil {
			t.Fatal(err)
		}
		if c.refused.Load() < 2 {
			t.Fatalf("%d commits refused, want several", c.refused.Load())
		}
		checkApplied(t, pool, recs, withStore)
		checkOnePerPoison(t, k, cfg.DLQTopic, recs)
	})
}

// storeCase is one run of a test of eachStoreMode: a kfake cluster, a
// config of its own topics and group whose offset commits fail at first, the applications table and its
// sink, and the runner options (with or without the offset store).
type storeCase struct {
	k         *testkit.Kafka
	cfg       run.Config
	pool      *pgxpool.Pool
	sink      *pgsink.Sink[applied]
	ropts     []run.Option
	withStore bool
	// The group's offset commits are refused while refuse is set (it is
	// at first), counted in refused.
	refuse  atomic.Bool
	refused atomic.Int32
}

// eachStoreMode runs test in parallel subtests, with the offset store and
// without, each on an input of partitions partitions.
func eachStoreMode(t *testing.T, partitions int32, test func(t *testing.T, c *storeCase)) {
	srv := testkit.NewPostgresServer(t)
	for _, withStore := range []bool{true, false} {
		name := map[bool]string{true: "with offset store", false: "without"}[withStore]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := &storeCase{k: testkit.NewKafka(t, testkit.ForceFake()), withStore: withStore}
			c.cfg = baseConfig(t, c.k, partitions)
			c.cfg.BatchMaxRecords = 10
			c.cfg.RevokeTimeout = time.Second
			c.refuse.Store(true)
			refuseCommits(c.k, &c.refuse, &c.refused)
			var popts []pgsink.Option
			if withStore {
				popts = append(popts, pgsink.WithOffsets())
			}
			c.pool, c.sink = applicationsSink(t, srv, popts...)
			if withStore {
				c.ropts = append(c.ropts, run.WithOffsetStore(c.sink))
			}
			test(t, c)
		})
	}
}

// gatedSink is a member's view of the shared sink: its write number block
// (counting from 1) waits for release, then writes like a zombie would, a
// member that lost its partition without noticing (context not cancelled,
// batch position kept); err is that write's error, set once done is closed.
type gatedSink struct {
	s       stages.Sink[applied]
	block   int32
	n       atomic.Int32
	blocked chan struct{} // closed when the gated write is blocked
	release chan struct{}
	done    chan struct{}
	err     error
}

func (g *gatedSink) Write(ctx context.Context, batch []applied) error {
	if g.n.Add(1) != g.block {
		return g.s.Write(ctx, batch)
	}
	close(g.blocked)
	<-g.release
	g.err = g.s.Write(context.WithoutCancel(ctx), batch)
	close(g.done)
	return g.err
}

// A zombie, a member whose worker stays blocked in the sink past the loss
// of its partition and writes its batch after the next owner claimed the
// partition and before it wrote anything: with the offset store its write is refused
// (pgsink.ErrFenced, nothing of it lands) and every record is applied
// once; without, its batch is applied a second time.
func TestOffsetStoreFencesAZombie(t *testing.T) {
	t.Parallel()
	eachStoreMode(t, 2, func(t *testing.T, c *storeCase) {
		k, cfg, pool, ropts := c.k, c.cfg, c.pool, c.ropts
		c.refuse.Store(false)
		cl, adm := k.Client(t), k.Admin(t)
		const n = 140
		recs := produce(t, cl, cfg.Topics[0], n, 10, poisonEvery)
		zombie := &gatedSink{s: c.sink, block: 2, blocked: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
		_, stopA := start(t, k, cfg, applyStage, stages.Sink[applied](zombie), ropts...)
		<-zombie.blocked
		// A stops: its blocked worker is abandoned after RevokeTimeout and
		// the group moves on without it.
		if err := stopA(); err != nil {
			t.Fatal(err)
		}
		// B claims the partitions, then holds its writes until the zombie
		// wrote: the offsets stored are still below the zombie's batch,
		// only the owner epoch can refuse it.
		var claimed atomic.Bool
		hook := run.WithAssignHook(func(context.Context, map[string][]int32) error { claimed.Store(true); return nil })
		heldB := make(chan struct{})
		sinkB := stages.SinkFunc[applied](func(ctx context.Context, batch []applied) error {
			<-heldB
			return c.sink.Write(ctx, batch)
		})
		cfgB := cfg
		cfgB.BatchMaxRecords = 7 // batches that straddle A's
		_, stopB := start(t, k, cfgB, applyStage, stages.Sink[applied](sinkB), append(ropts, hook)...)
		testkit.WaitFor(t, 30*time.Second, "B assigned the partitions", claimed.Load)
		close(zombie.release)
		<-zombie.done
		close(heldB)
		testkit.WaitFor(t, 30*time.Second, "every offset committed", func() bool {
			return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n
		})
		if err := stopB(); err != nil {
			t.Fatal(err)
		}
		if c.withStore != errors.Is(zombie.err, pgsink.ErrFenced) {
			t.Errorf("the zombie's write returned %v; fenced: want %v", zombie.err, c.withStore)
		}
		checkApplied(t, pool, recs, c.withStore)
	})
}

// fakeStore is an OffsetStore whose first claim fails; it then returns
// next and the epoch generation+10.
type fakeStore struct {
	next   int64
	failed atomic.Bool
	claims atomic.Int32
}

func (f *fakeStore) Claim(_ context.Context, _, _ string, _, generation int32) (int64, int32, error) {
	if f.failed.CompareAndSwap(false, true) {
		return 0, 0, errors.New("store down")
	}
	f.claims.Add(1)
	return f.next, generation + 10, nil
}

// The runner claims every assigned partition (a failed claim is retried
// and counted as sluice_runtime_errors_total{kind="claim"}) and hands the
// sink each batch's position: the group, the partition, the offset after
// the batch and the claimed epoch. Without an offset store Write's
// context has no position.
func TestOffsetStorePositions(t *testing.T) {
	t.Parallel()
	for _, withStore := range []bool{true, false} {
		t.Run(map[bool]string{true: "with offset store", false: "without"}[withStore], func(t *testing.T) {
			t.Parallel()
			k := testkit.NewKafka(t, testkit.ForceFake())
			cfg := baseConfig(t, k, 2)
			cfg.BatchMaxRecords = 10
			const n = 60
			produce(t, k.Client(t), cfg.Topics[0], n, 6, nil)
			store := &fakeStore{next: -1}
			reg := prometheus.NewRegistry()
			opts := []run.Option{run.WithRegisterer(reg)}
			if withStore {
				opts = append(opts, run.WithOffsetStore(store))
			}
			var mu sync.Mutex
			next := map[int32]int64{} // greatest Next per partition
			var written, unpositioned int
			sink := stages.SinkFunc[msg](func(ctx context.Context, batch []msg) error {
				mu.Lock()
				defer mu.Unlock()
				written += len(batch)
				pos, ok := stages.PositionOf(ctx)
				if !ok {
					unpositioned += len(batch)
					return nil
				}
				last := batch[len(batch)-1].Source
				if pos.Group != cfg.Group || pos.Topic != last.Topic || pos.Partition != last.Partition || pos.Next != last.Offset+1 || pos.Epoch != 11 {
					t.Errorf("position %+v for a batch ending at %s/%d@%d, want group %s, next %d, epoch 11", pos, last.Topic, last.Partition, last.Offset, cfg.Group, last.Offset+1)
				}
				next[pos.Partition] = max(next[pos.Partition], pos.Next)
				return nil
			})
			_, stop := start(t, k, cfg, passthrough, stages.Sink[msg](sink), opts...)
			testkit.WaitFor(t, 30*time.Second, "every record written", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return written == n
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			claimErrors := testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "claim")
			if !withStore {
				if unpositioned != n || claimErrors != 0 {
					t.Errorf("without a store: %d items written without a position (want %d), %v claim errors", unpositioned, n, claimErrors)
				}
				return
			}
			if store.claims.Load() != 2 || claimErrors != 1 {
				t.Errorf("%d claims after 1 failure counted %v times, want 2 claims and 1 counted", store.claims.Load(), claimErrors)
			}
			if sum(map[int32]int64(next)) != n || unpositioned != 0 {
				t.Errorf("last positions %v (%d items without), want the partitions' ends (summing to %d)", next, unpositioned, n)
			}
		})
	}
}

// An offset store does not go with coalescing windows or timers.
func TestOffsetStoreRefusesWindowsAndTimers(t *testing.T) {
	t.Parallel()
	cfg := run.Config{Name: "p", Topics: []string{"in"}, DLQTopic: "in.dlq"}
	win := cfg
	win.Window = run.WindowConfig{MaxKeys: 10}
	sink := memsink.New[msg]()
	if _, err := run.New(win, decodeString, passthrough, stages.Sink[msg](mergeSink{sink}), run.WithOffsetStore(&fakeStore{next: -1})); err == nil || !strings.Contains(err.Error(), "windows") {
		t.Errorf("windows: New = %v, want a refusal", err)
	}
	timers := run.WithTimers[msg](time.Second, func(context.Context, run.Firing) ([]msg, error) { return nil, nil })
	if _, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](sink), run.WithOffsetStore(&fakeStore{next: -1}), timers); err == nil || !strings.Contains(err.Error(), "timers") {
		t.Errorf("timers: New = %v, want a refusal", err)
	}
	conc := cfg
	conc.KeyConcurrency = 4
	if _, err := run.New(conc, decodeString, passthrough, stages.Sink[msg](sink), run.WithOffsetStore(&fakeStore{next: -1})); err == nil || !strings.Contains(err.Error(), "KeyConcurrency") {
		t.Errorf("key concurrency: New = %v, want a refusal", err)
	}
	if _, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](sink), run.WithOffsetStore(&fakeStore{next: -1})); err != nil {
		t.Errorf("plain: New = %v", err)
	}
}

// A stored offset past the partition's end (the topic was recreated, its
// offsets restarted) stops the runner with an error saying so, instead of
// skipping every record of the new log.
func TestOffsetStorePastTheEnd(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	produce(t, k.Client(t), cfg.Topics[0], 20, 2, nil)
	sink := memsink.New[msg]()
	r, err := run.New(cfg, decodeString, passthrough, stages.Sink[msg](sink),
		run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)), run.WithOffsetStore(&fakeStore{next: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(testkit.Context(t))
	if err == nil || !strings.Contains(err.Error(), "past the partition's end 20") || !strings.Contains(err.Error(), "recreated") {
		t.Fatalf("Run = %v, want an error about the stored offset 1000 past the end 20", err)
	}
	if sink.Len() != 0 {
		t.Errorf("%d records written", sink.Len())
	}
}
