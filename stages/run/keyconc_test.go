package run_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// overlapProbe is a stage wrapper that measures concurrency: how many
// calls run at once (max), and whether two calls of one key ever did.
type overlapProbe struct {
	inflight, max atomic.Int32
	mu            sync.Mutex
	busy          map[string]bool
	sameKey       []string // keys called while a call of theirs ran
}

func (p *overlapProbe) enter(key string) {
	n := p.inflight.Add(1)
	for m := p.max.Load(); n > m && !p.max.CompareAndSwap(m, n); m = p.max.Load() {
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy[key] {
		p.sameKey = append(p.sameKey, key)
	}
	p.busy[key] = true
}

func (p *overlapProbe) leave(key string) {
	p.mu.Lock()
	p.busy[key] = false
	p.mu.Unlock()
	p.inflight.Add(-1)
}

// With KeyConcurrency, records of different keys of one partition run at
// once (the first record of k-0 and the first of another key each block
// until the other has started: one after the other, they would wait for
// ever), at most KeyConcurrency of them; records of one
// key never overlap and keep their order, both in the key's state store
// entry and in the sink; the sink gets the outputs in offset order; the
// dead letters are the records that asked for one, each with its own
// source offset; and every record is committed.
func TestKeyConcurrencyOverlapsKeysKeepsOrder(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 1)
	cfg.KeyConcurrency = 4
	const n, keys = 60, 8
	recs := produce(t, k.Client(t), cfg.Topics[0], n, keys, nil)
	store := newKeyTallies(t, changelog, nil)
	probe := &overlapProbe{busy: map[string]bool{}}
	zeroIn, other := make(chan struct{}), make(chan struct{})
	var otherOnce sync.Once
	var orderMu sync.Mutex
	seen := map[string][]int64{} // offsets per key in call order
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		probe.enter(m.Key)
		defer probe.leave(m.Key)
		orderMu.Lock()
		seen[m.Key] = append(seen[m.Key], m.Source.Offset)
		orderMu.Unlock()
		// A handshake: k-0's first record and the first record of another
		// key each wait until the other has entered, so both are in at once.
		if m.Key != "k-0" {
			otherOnce.Do(func() {
				select {
				case <-zeroIn:
				case <-ctx.Done():
				}
				close(other)
			})
		} else if m.Source.Offset == 0 {
			close(zeroIn)
			select {
			case <-other:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		st, err := store.Of(ctx)
		if err != nil {
			return nil, err
		}
		c, _ := st.Get(m.Key)
		c.N++
		if err := st.Put(m.Key, c); err != nil {
			return nil, err
		}
		if m.Source.Offset%7 == 3 {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "test.seven", errors.New("offset ≡ 3 mod 7"))
		}
		return []msg{{Key: m.Key, Value: m.Value + "#" + strconv.Itoa(c.N), Source: m.Source}}, nil
	}
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, stages.Sink[msg](sink), run.WithStores(store))
	var dead []int64
	for i := range n {
		if i%7 == 3 {
			dead = append(dead, int64(i))
		}
	}
	testkit.WaitFor(t, 60*time.Second, "every record committed", func() bool {
		return testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])[0] == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	if m := probe.max.Load(); m < 2 || m > 4 {
		t.Errorf("at most %d calls ran at once, want 2…4 (KeyConcurrency 4); calls per key %v", m, seen)
	}
	if len(probe.sameKey) > 0 {
		t.Errorf("calls of one key overlapped: %v", probe.sameKey)
	}
	for key, offs := range seen {
		for i := 1; i < len(offs); i++ {
			if offs[i] <= offs[i-1] {
				t.Errorf("key %s called at offsets %v, not in offset order", key, offs)
				break
			}
		}
	}
	// Outputs: one per record not dead-lettered, in offset order, each
	// with its key's count at that record (its rank among the key's).
	items := sink.Items()
	rank := map[string]int{}
	j := 0
	for i, r := range recs {
		rank[string(r.Key)]++
		if i%7 == 3 {
			continue
		}
		want := fmt.Sprintf("v-%d#%d", i, rank[string(r.Key)])
		if j >= len(items) {
			t.Fatalf("%d outputs, want %d", len(items), n-len(dead))
		}
		if items[j].Value != want || items[j].Source.Offset != int64(i) {
			t.Fatalf("output %d is %q (offset %d), want %q (offset %d)", j, items[j].Value, items[j].Source.Offset, want, i)
		}
		j++
	}
	if j != len(items) {
		t.Errorf("%d outputs, want %d", len(items), j)
	}
	checkTallies(t, k, store, wantTallies(recs), -1)
	dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
	var got []int64
	for _, r := range dlq {
		off, err := strconv.ParseInt(header(r, "dlq.source.offset"), 10, 64)
		if err != nil {
			t.Fatalf("dead letter without a source offset: %v", r.Headers)
		}
		if v := string(r.Value); v != fmt.Sprintf("v-%d", off) || header(r, "dlq.rule") != "test.seven" {
			t.Errorf("dead letter of offset %d holds %q, rule %q", off, v, header(r, "dlq.rule"))
		}
		got = append(got, off)
	}
	if fmt.Sprint(got) != fmt.Sprint(dead) {
		t.Errorf("dead letters of offsets %v, want %v", got, dead)
	}
}

// header returns the value of r's header key, or "".
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// A batch run with KeyConcurrency commits up to its first record not done:
// the record of key slow (offset 2) is still running, the records after it
// (other keys) have finished, when the runner stops; the slow record gives
// up (stages.ErrStopped). The offset committed is 2, not past it, the
// finished records after it wrote no output, and the next member starts
// at offset 2: across both members every record has exactly one output.
func TestKeyConcurrencyCommitsBelowUnfinished(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.KeyConcurrency = 3
	const n = 10
	recs := make([]*kgo.Record, n)
	for i := range recs {
		key := fmt.Sprintf("k-%d", i)
		if i == 2 {
			key = "slow"
		}
		recs[i] = &kgo.Record{Topic: cfg.Topics[0], Key: []byte(key), Value: []byte(fmt.Sprintf("v-%d", i))}
	}
	if err := k.Client(t).ProduceSync(testkit.Context(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var finished atomic.Int32 // records other than the slow one done
	slowWaiting := make(chan struct{})
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		if m.Key != "slow" {
			finished.Add(1)
			return []msg{m}, nil
		}
		close(slowWaiting)
		select {
		case <-stages.Stopping(ctx):
			return nil, fmt.Errorf("slow record: %w", stages.ErrStopped)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	first := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, stages.Sink[msg](first))
	testkit.WaitFor(t, 60*time.Second, "the slow record running and the 9 others done", func() bool {
		select {
		case <-slowWaiting:
			return finished.Load() == n-1
		default:
			return false
		}
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])[0]; got != 2 {
		t.Errorf("committed %d, want 2 (below the unfinished record)", got)
	}
	if got := values(first.Items()); got != "[v-0 v-1]" {
		t.Errorf("first member wrote %s, want [v-0 v-1]", got)
	}
	next := memsink.New[msg]()
	_, stop = start(t, k, cfg, passthrough, stages.Sink[msg](next))
	testkit.WaitFor(t, 30*time.Second, "the next member to process the rest", func() bool { return next.Len() >= n-2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got, want := values(next.Items()), "[v-2 v-3 v-4 v-5 v-6 v-7 v-8 v-9]"; got != want {
		t.Errorf("next member wrote %s, want %s", got, want)
	}
	if dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted()); len(dlq) != 0 {
		t.Errorf("%d dead letters, want none", len(dlq))
	}
}

// values lists the values of ms.
func values(ms []msg) string {
	vs := make([]string, len(ms))
	for i, m := range ms {
		vs[i] = m.Value
	}
	return fmt.Sprint(vs)
}

// A fatal error of one key's record stops the batch there: the records
// before it are committed, it and the records after it are not (those of
// other keys that finished meanwhile included), and Run returns the error.
func TestKeyConcurrencyFatalStopsAtItsRecord(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.KeyConcurrency = 4
	const n = 12
	produce(t, k.Client(t), cfg.Topics[0], n, n, nil) // a key per record
	stage := func(_ context.Context, m msg) ([]msg, error) {
		if m.Value == "v-5" {
			return nil, stages.Fatal(errors.New("boom"))
		}
		return []msg{m}, nil
	}
	sink := memsink.New[msg]()
	r, err := run.New(cfg, decodeString, stage, stages.Sink[msg](sink), run.WithKafkaOpts(k.Opts(t)...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := r.Run(ctx); err == nil || !strings.Contains(err.Error(), "boom") || ctx.Err() != nil {
		t.Fatalf("Run returned %v, want the stage's fatal error before the deadline", err)
	}
	if got := values(sink.Items()); got != "[v-0 v-1 v-2 v-3 v-4]" {
		t.Errorf("outputs %s, want those of the records before the fatal one", got)
	}
	if got := testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])[0]; got != 5 {
		t.Errorf("committed %d, want 5", got)
	}
}

// A negative KeyConcurrency is invalid, and the transactional runner
// refuses KeyConcurrency.
func TestKeyConcurrencyConfig(t *testing.T) {
	t.Parallel()
	cfg := run.Config{Name: "p", Topics: []string{"in"}, DLQTopic: "dlq", KeyConcurrency: -1}
	if err := cfg.Validate(); err == nil {
		t.Error("KeyConcurrency -1 validated")
	}
	cfg.KeyConcurrency = 2
	if err := cfg.Validate(); err != nil {
		t.Errorf("KeyConcurrency 2: %v", err)
	}
	decode := func(_, v []byte) ([]byte, error) { return v, nil }
	txStage := func(_ context.Context, m stages.Msg[[]byte]) ([]*kgo.Record, error) { return nil, nil }
	if _, err := run.NewTransactional(cfg, "p-tx", decode, txStage, run.WithKafkaOpts(kgo.SeedBrokers("127.0.0.1:1"))); err == nil {
		t.Error("the transactional runner accepted KeyConcurrency 2")
	}
}

// A batch run with KeyConcurrency grows while a record runs: the record
// of key slow waits until the records produced after it started have been
// handled. They arrive after its batch was taken, so without the growth
// they would wait for that batch to end, and it would never end.
func TestKeyConcurrencyBatchGrowsPastSlowRecord(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.KeyConcurrency = 2
	cl := k.Client(t)
	if err := cl.ProduceSync(testkit.Context(t), &kgo.Record{Topic: cfg.Topics[0], Key: []byte("slow"), Value: []byte("slow")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	const later = 20
	var handled atomic.Int32
	laterDone, slowIn := make(chan struct{}), make(chan struct{})
	stage := func(ctx context.Context, m msg) ([]msg, error) {
		if m.Key == "slow" {
			close(slowIn)
			select {
			case <-laterDone:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return []msg{m}, nil
		}
		if handled.Add(1) == later {
			close(laterDone)
		}
		return []msg{m}, nil
	}
	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, stage, stages.Sink[msg](sink))
	select {
	case <-slowIn:
	case <-time.After(60 * time.Second):
		t.Fatal("the slow record never started")
	}
	produce(t, cl, cfg.Topics[0], later, 5, nil)
	testkit.WaitFor(t, 60*time.Second, "every record committed", func() bool {
		return testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])[0] == later+1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	items := sink.Items()
	if len(items) != later+1 || items[0].Value != "slow" {
		t.Fatalf("outputs %s, want slow first, then the %d others", values(items), later)
	}
	for i, it := range items[1:] {
		if want := fmt.Sprintf("v-%d", i); it.Value != want {
			t.Fatalf("output %d is %s, want %s (offset order)", i+1, it.Value, want)
		}
	}
}
