package run_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// A worker the runtime abandoned (its stage ignored the cancel) and whose
// partition moved on is a zombie: when its stage returns at last, its
// later writes fail and the writes it made before are not produced
// (sluice_state_fenced_total{where="write"}), so the new owner's state is
// the only one in the changelog.
func TestZombieWriteFenced(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 1)
	cfg.RevokeTimeout = 200 * time.Millisecond
	adm := k.Admin(t)

	storeA := newKeyTallies(t, changelog, nil)
	blocked, release := make(chan struct{}), make(chan struct{})
	lateErr := make(chan error, 1)
	zombie := func(ctx context.Context, m msg) ([]msg, error) {
		st, err := storeA.Of(ctx)
		if err != nil {
			return nil, err
		}
		if err := st.Put("zombie", keyTally{N: 1}); err != nil {
			return nil, err
		}
		close(blocked)
		<-release // ignores ctx: the runner abandons this worker
		lateErr <- st.Put("zombie", keyTally{N: 2})
		return []msg{m}, nil
	}
	regA := prometheus.NewRegistry()
	_, stopA := start(t, k, cfg, zombie, memsink.New[msg](), run.WithStores(storeA), run.WithRegisterer(regA))
	recs := produce(t, k.Client(t), cfg.Topics[0], 20, 4, nil)
	<-blocked
	if err := stopA(); err != nil { // abandons the blocked worker, leaves the group
		t.Fatal(err)
	}

	storeB := newKeyTallies(t, changelog, nil)
	_, stopB := start(t, k, cfg, tallyStage(storeB), memsink.New[msg](), run.WithStores(storeB))
	testkit.WaitFor(t, 30*time.Second, "the new owner to commit every record", func() bool {
		return testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])[0] == int64(len(recs))
	})
	close(release)
	if err := <-lateErr; !errors.Is(err, run.ErrPartitionClosed) {
		t.Errorf("the zombie's late Put: %v, want ErrPartitionClosed", err)
	}
	testkit.WaitFor(t, 30*time.Second, "the zombie's flush fenced", func() bool {
		return testkit.Metric(t, regA, "sluice_state_fenced_total", "store", "tallies", "where", "write") == 1
	})
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	for _, r := range k.ReadTopic(t, changelog) {
		if string(r.Key) == "zombie" {
			t.Errorf("the zombie's write reached the changelog at offset %d", r.Offset)
		}
	}
	checkTallies(t, k, storeB, wantTallies(recs), 0)
}

// Partitions moving between members in a rebalance take their state with
// them: the new owner restores it before processing, and every key's
// count is exact in the end. The assign hook and the stage see the
// generation of the assignment, which is the epoch of the owner's
// changelog records: along each changelog partition the epochs never
// decrease, and a partition that moved shows A's epoch, then B's greater
// one.
func TestStoreRebalanceExact(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg, changelog := stateConfig(t, k, 4)
	adm := k.Admin(t)
	const n = 2000
	recs := produce(t, k.Client(t), cfg.Topics[0], n, 53, nil)
	// Member A is slow until B has partitions, so that B's join moves
	// partitions that A has state for but has not finished.
	regB := prometheus.NewRegistry()
	var bAssigned atomic.Bool
	slow := func(batch []msg, _ int) error {
		if !bAssigned.Load() {
			bAssigned.Store(testkit.Metric(t, regB, "sluice_assigned_partitions") > 0)
			time.Sleep(time.Duration(len(batch)) * 5 * time.Millisecond)
		}
		return nil
	}
	var mu sync.Mutex
	hooked := map[string][]int32{}       // member: generations its assign hook saw
	seen := map[string]map[int32]int32{} // member: partition: the epoch its stage saw
	hook := func(member string) run.Option {
		return run.WithAssignHook(func(ctx context.Context, _ map[string][]int32) error {
			g, ok := run.AssignedGeneration(ctx)
			if !ok {
				return errors.New("no generation in the assign hook's context")
			}
			mu.Lock()
			defer mu.Unlock()
			hooked[member] = append(hooked[member], g)
			return nil
		})
	}
	stage := func(member string, store *run.Store[keyTally]) stages.Func[string, msg] {
		tally := tallyStage(store)
		return func(ctx context.Context, m msg) ([]msg, error) {
			o, ok := run.Owner(ctx)
			if !ok || o.Partition != m.Source.Partition || o.Epoch != o.Generation {
				return nil, stages.Fatal(fmt.Errorf("ownership %+v (%v) of a record of partition %d", o, ok, m.Source.Partition))
			}
			mu.Lock()
			if seen[member] == nil {
				seen[member] = map[int32]int32{}
			}
			seen[member][o.Partition] = o.Epoch
			mu.Unlock()
			return tally(ctx, m)
		}
	}
	storeA := newKeyTallies(t, changelog, nil)
	sinkA := memsink.New(memsink.WithFailure(slow))
	_, stopA := start(t, k, cfg, stage("A", storeA), sinkA, run.WithStores(storeA), hook("A"))
	testkit.WaitFor(t, 60*time.Second, "member A to write 300 records", func() bool { return sinkA.Len() >= 300 })

	storeB := newKeyTallies(t, changelog, nil)
	sinkB := memsink.New[msg]()
	_, stopB := start(t, k, cfg, stage("B", storeB), sinkB, run.WithStores(storeB), run.WithRegisterer(regB), hook("B"))
	testkit.WaitFor(t, 120*time.Second, "every record committed", func() bool {
		return sum(testkit.Committed(t, adm, cfg.Group, cfg.Topics[0])) == n
	})
	for _, stop := range []func() error{stopA, stopB} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	if sinkB.Len() == 0 {
		t.Fatal("member B got no partition: no rebalance moved state")
	}
	if got := testkit.Metric(t, regB, "sluice_state_restore_records_total", "store", "tallies"); got == 0 {
		t.Error("member B restored no changelog record of the partitions it took over")
	}
	checkTallies(t, k, newKeyTallies(t, changelog, nil), wantTallies(recs), 0)

	mu.Lock()
	defer mu.Unlock()
	for member, byPart := range seen {
		for p, epoch := range byPart {
			if !slices.Contains(hooked[member], epoch) {
				t.Errorf("member %s processed partition %d at epoch %d, not a generation its assign hook saw (%v)", member, p, epoch, hooked[member])
			}
		}
	}
	epochs := map[int32][]int{} // partition: the epochs of its changelog records, in offset order
	for _, r := range k.ReadTopic(t, changelog) {
		e, _ := testkit.Header(r, run.HeaderStateEpoch)
		if es := epochs[r.Partition]; len(es) == 0 || es[len(es)-1] != atoi(t, e) {
			epochs[r.Partition] = append(es, atoi(t, e))
		}
	}
	moved := 0
	for p, es := range epochs {
		if !slices.IsSorted(es) {
			t.Errorf("changelog partition %d: epochs %v decrease", p, es)
		}
		if len(es) > 1 {
			moved++
			if want := int(seen["B"][p]); es[len(es)-1] != want {
				t.Errorf("changelog partition %d: epochs %v, want B's %d last", p, es, want)
			}
		}
	}
	if moved == 0 {
		t.Errorf("no changelog partition has two owners' epochs: %v", epochs)
	}
}
