package run_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages/run"
)

// A dead-letter transaction over two partitions whose end reported an
// error, and whose outcome could not be read at once, stays one
// transaction when one of its partitions moves to another member that
// commits that partition further before the outcome is read: the member
// that kept the other partition judges the outcome by that partition's
// offset. Before, a committed transaction was judged aborted because the
// moved partition's offset differed, and the kept partition's dead letter
// was produced a second time. Aborted, the kept partition's dead letter
// is produced again, and the moved one's by its new owner.
func TestDLQUnsureTransactionSurvivesPartitionMovedAndCommittedFurther(t *testing.T) {
	t.Parallel()
	bothWays(t, "aborted", "committed", unsureWhilePartitionMoves) // committed: the broker committed the transaction whose end failed
}

func unsureWhilePartitionMoves(t *testing.T, committed bool) {
	k := testkit.NewKafka(t, testkit.ForceFake())
	// A commit at offset 5 is member B's.
	var furtherCommitted atomic.Bool
	cfg, manual, recs, both := twoPoisonPartitions(t, k, func(off int64) {
		furtherCommitted.Store(furtherCommitted.Load() || off == 5)
	})
	topic := cfg.Topics[0]
	k.Fake().ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		for _, rt := range req.(*kmsg.OffsetCommitRequest).Topics {
			for _, p := range rt.Partitions {
				furtherCommitted.Store(furtherCommitted.Load() || p.Offset == 5) // (v10+ names the topic by id only)
			}
		}
		return nil, nil, false
	})
	var refuseFetch atomic.Bool
	failed := failCommitEnd(t, k, committed, both.Load, func() { refuseFetch.Store(true) })
	var refused atomic.Int32
	k.Fake().ControlKey(int16(kmsg.OffsetFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		if !refuseFetch.Load() || !fetchesAllTopics(req.(*kmsg.OffsetFetchRequest)) {
			return nil, nil, false // the group members' own fetches pass
		}
		refused.Add(1)
		return offsetFetchRefusal(req.(*kmsg.OffsetFetchRequest)), nil, true
	})

	_, stopA := start(t, k, cfg, poisonStage, memsink.New[msg]())
	testkit.WaitFor(t, 30*time.Second, "the transaction's end answered with an error and its outcome left unknown",
		func() bool { return failed.Load() != nil && refused.Load() > 0 })
	if err := *failed.Load(); err != nil {
		t.Fatalf("commit the transaction behind the member's back: %v", err)
	}
	cfgB := cfg
	cfgB.CommitInterval = 100 * time.Millisecond
	_, stopB := start(t, k, cfgB, poisonStage, memsink.New[msg]()) // takes one partition from A
	// Whichever partition B got, it commits it further (at 5).
	recs = append(recs, producePartitions(t, manual, topic, 0, "v", "v")...)
	recs = append(recs, producePartitions(t, manual, topic, 1, "v", "v")...)
	testkit.WaitFor(t, 30*time.Second, "member B's commit past the transaction", furtherCommitted.Load)
	refuseFetch.Store(false)
	if err := stopA(); err != nil { // its final commit learns the outcome first
		t.Fatalf("stop A: %v", err)
	}
	if err := stopB(); err != nil {
		t.Fatalf("stop B: %v", err)
	}
	checkOnePerPoison(t, k, cfg.DLQTopic, recs)
	for p, off := range testkit.Committed(t, k.Admin(t), cfg.Group, topic) {
		if off != 5 {
			t.Errorf("partition %d committed at %d, want 5", p, off)
		}
	}
}

// twoPoisonPartitions returns the configuration of a member (committing
// only at dead letters' kicks, revokes and its stop) of a two-partition
// topic, with records "v", "poison-a", "v" in partition 0 and "v",
// "poison-b", "v" in partition 1, the client that produced them
// (partitioning manually) and a flag set once a transaction commits both
// partitions: until then k's cluster refuses every transactional offset
// commit (the committer retries with what was submitted meanwhile), so
// that the first transaction that ends carries both dead letters. onOffset
// sees every offset a transactional offset commit carries.
func twoPoisonPartitions(t *testing.T, k *testkit.Kafka, onOffset func(int64)) (run.Config, *kgo.Client, []*kgo.Record, *atomic.Bool) {
	t.Helper()
	cfg := baseConfig(t, k, 2)
	cfg.CommitInterval = time.Hour
	manual := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	recs := producePartitions(t, manual, cfg.Topics[0], 0, "v", "poison-a", "v")
	recs = append(recs, producePartitions(t, manual, cfg.Topics[0], 1, "v", "poison-b", "v")...)
	both := new(atomic.Bool)
	k.Fake().ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		rq := req.(*kmsg.TxnOffsetCommitRequest)
		n := 0
		for _, rt := range rq.Topics {
			for _, p := range rt.Partitions {
				n++
				onOffset(p.Offset)
			}
		}
		if both.Load() || n == 2 {
			both.Store(true)
			return nil, nil, false
		}
		return testkit.TxnOffsetCommitRefusal(rq, kerr.IllegalGeneration.Code), nil, true
	})
	return cfg, manual, recs, both
}

// producePartitions writes records with values to partition p of topic
// (cl must partition manually) and returns them with their coordinates.
func producePartitions(t *testing.T, cl *kgo.Client, topic string, p int32, values ...string) []*kgo.Record {
	t.Helper()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Topic: topic, Partition: p, Key: []byte(fmt.Sprintf("k-%d", p)), Value: []byte(v)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	return recs
}

// failCommitEnd makes k's cluster answer the first committing EndTxn sent
// once when() holds UNKNOWN_SERVER_ERROR (an end of unknown outcome). With
// commit, the transaction is committed first, by the same EndTxn from a
// second client while the cluster holds that request (a commit whose
// answer was lost). before runs just before the answer. The returned
// value holds the second client's error (nil without commit) once the
// answer is due.
func failCommitEnd(t *testing.T, k *testkit.Kafka, commit bool, when func() bool, before func()) *atomic.Pointer[error] {
	t.Helper()
	var injected, cloning atomic.Bool
	var sent atomic.Pointer[error]
	k.Fake().ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		rq := req.(*kmsg.EndTxnRequest)
		if !rq.Commit || cloning.Load() || !when() || injected.Swap(true) {
			return nil, nil, false
		}
		var err error
		if commit {
			cloning.Store(true)
			err = sendEndTxnAside(t, k, rq)
		}
		before()
		sent.Store(&err)
		resp := rq.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})
	return &sent
}

// sendEndTxnAside sends a copy of rq (sendEndTxn) from the control
// function of k's cluster that holds rq, sleeping meanwhile (the cluster
// serves other connections), and returns its error. The control function
// must let the copy pass.
func sendEndTxnAside(t *testing.T, k *testkit.Kafka, rq *kmsg.EndTxnRequest) error {
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		err = sendEndTxn(t, k, rq)
	}()
	k.Fake().SleepControl(func() { <-done })
	return err
}

// sendEndTxn sends a copy of rq, at rq's version, from a client of its own.
func sendEndTxn(t *testing.T, k *testkit.Kafka, rq *kmsg.EndTxnRequest) error {
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(int16(kmsg.EndTxn), rq.Version)
	cl := k.Client(t, kgo.MaxVersions(versions))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp := kmsg.NewPtrEndTxnRequest()
	cp.TransactionalID, cp.ProducerID, cp.ProducerEpoch, cp.Commit = rq.TransactionalID, rq.ProducerID, rq.ProducerEpoch, true
	resp, err := cp.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}

// fetchesAllTopics reports whether req reads every committed offset of
// its group (an admin's read, as the committer's check of the outcome),
// not the offsets of assigned partitions (a group member's).
func fetchesAllTopics(req *kmsg.OffsetFetchRequest) bool {
	if len(req.Topics) > 0 {
		return false
	}
	for _, g := range req.Groups {
		if len(g.Topics) > 0 {
			return false
		}
	}
	return true
}

// A dead-letter transaction whose end failed while the broker was still
// completing its commit (the coordinator answers the producer's
// re-initialization CONCURRENT_TRANSACTIONS until the commit's markers are
// written, and the group's offsets still show the previous commit) is not
// judged aborted from the offsets read meanwhile: kgo's abort after an
// end of unknown outcome reports success even when its re-initialization
// of the producer, which is what completes the transaction, failed. The
// outcome is read only once the producer has been initialized again, and
// the transaction's dead letter is not produced a second time. When the
// re-initialization is refused as fenced (the broker aborted the
// transaction and bumped the epoch), a new producer is initialized
// instead, and the dead letter is produced again, once.
//
// kfake commits at once, so the broker's completion is played by the
// test: the committing EndTxn is answered UNKNOWN_SERVER_ERROR unapplied,
// the producer's re-initialization is answered CONCURRENT_TRANSACTIONS
// until the test has committed the transaction with a copy of that
// EndTxn (or PRODUCER_FENCED, and kfake aborts the transaction when a new
// producer of the transactional id is initialized).
func TestDLQEndFailedWhileCommitCompletesKeepsOneDeadLetter(t *testing.T) {
	t.Parallel()
	bothWays(t, "broker still committing", "producer fenced", endFailedThenReinit)
}

func endFailedThenReinit(t *testing.T, fence bool) {
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 1)
	cfg.CommitInterval = time.Hour // only the dead letter's kick and the stop commit
	recs := produce(t, k.Client(t), cfg.Topics[0], 3, 1, func(i int) string {
		if i == 1 {
			return "poison-1"
		}
		return "v"
	})
	var end atomic.Pointer[kmsg.EndTxnRequest] // the committing EndTxn answered with an error, unapplied
	var completing atomic.Bool
	k.Fake().ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		rq := req.(*kmsg.EndTxnRequest)
		if !rq.Commit || end.Load() != nil {
			return nil, nil, false
		}
		end.Store(rq)
		completing.Store(true)
		resp := rq.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})
	var inits atomic.Int32
	k.Fake().ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		rq := req.(*kmsg.InitProducerIDRequest)
		if !completing.Load() || rq.TransactionalID == nil || *rq.TransactionalID != end.Load().TransactionalID ||
			fence && rq.ProducerID != end.Load().ProducerID { // a new producer's initialization passes
			return nil, nil, false
		}
		inits.Add(1)
		resp := rq.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ConcurrentTransactions.Code
		if fence {
			resp.ErrorCode = kerr.ProducerFenced.Code
		}
		return resp, nil, true
	})
	reg := prometheus.NewRegistry()
	_, stop := start(t, k, cfg, poisonStage, memsink.New[msg](), run.WithRegisterer(reg))
	testkit.WaitFor(t, 30*time.Second, "the failed commit", func() bool {
		return inits.Load() > 0 && testkit.Metric(t, reg, "sluice_runtime_errors_total", "kind", "commit") >= 1
	})
	if !fence {
		if err := sendEndTxn(t, k, end.Load()); err != nil { // the broker completes the commit
			t.Fatalf("commit the transaction: %v", err)
		}
		completing.Store(false)
	}
	if err := stop(); err != nil { // the final commit
		t.Fatalf("stop: %v", err)
	}
	checkOnePerPoison(t, k, cfg.DLQTopic, recs)
	if got := testkit.Committed(t, k.Admin(t), cfg.Group, cfg.Topics[0])[0]; got != 3 {
		t.Errorf("committed offset %d, want 3", got)
	}
}

// A revoke that gives up waiting for a commit whose EndTxn the broker
// holds (the partition moves on without the revoke's commit) leaves one
// dead letter per poison record whether the broker then commits that
// transaction and answers (answered), or commits it and the answer is
// lost (lost): the member learns the outcome from the partition it kept,
// and the new owner of the moved partition starts after the transaction's
// offsets, once the transaction is complete (RequireStableFetchOffsets).
func TestDLQRevokeDuringHeldCommitEndKeepsOneDeadLetter(t *testing.T) {
	t.Parallel()
	bothWays(t, "answered", "lost", revokeDuringHeldEnd)
}

// bothWays runs f as two parallel subtests: named no with false, and yes
// with true.
func bothWays(t *testing.T, no, yes string, f func(t *testing.T, b bool)) {
	for _, b := range []bool{false, true} {
		name := no
		if b {
			name = yes
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
}

func revokeDuringHeldEnd(t *testing.T, lost bool) {
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg, _, recs, both := twoPoisonPartitions(t, k, func(int64) {})
	cfg.RevokeTimeout = 300 * time.Millisecond // the revoke's commit gives up waiting for the held one
	topic := cfg.Topics[0]
	var held, cloning atomic.Bool
	inEnd, release := make(chan struct{}), make(chan struct{})
	var cloneErr error
	k.Fake().ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		rq := req.(*kmsg.EndTxnRequest)
		if !rq.Commit || cloning.Load() || !both.Load() || held.Swap(true) {
			return nil, nil, false
		}
		close(inEnd)
		k.Fake().SleepControl(func() { <-release }) // only this connection waits
		if !lost {
			return nil, nil, false
		}
		cloning.Store(true)
		cloneErr = sendEndTxnAside(t, k, rq)
		resp := rq.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})
	regA := prometheus.NewRegistry()
	_, stopA := start(t, k, cfg, poisonStage, memsink.New[msg](), run.WithRegisterer(regA))
	select {
	case <-inEnd:
	case <-time.After(30 * time.Second):
		t.Fatal("no committing EndTxn of both partitions within 30s")
	}
	regB := prometheus.NewRegistry()
	_, stopB := start(t, k, cfg, poisonStage, memsink.New[msg](), run.WithRegisterer(regB)) // takes one partition from A
	testkit.WaitFor(t, 30*time.Second, "a partition moved to B (A's revoke gave up on its commit)", func() bool {
		return testkit.Metric(t, regB, "sluice_assigned_partitions") >= 1
	})
	if got := testkit.Metric(t, regA, "sluice_assigned_partitions"); got != 1 {
		t.Fatalf("A holds %v partitions, want 1", got)
	}
	close(release)
	if err := stopA(); err != nil {
		t.Fatalf("stop A: %v", err)
	}
	if err := stopB(); err != nil {
		t.Fatalf("stop B: %v", err)
	}
	if cloneErr != nil {
		t.Fatalf("commit the transaction behind the member's back: %v", cloneErr)
	}
	checkOnePerPoison(t, k, cfg.DLQTopic, recs)
	for p, off := range testkit.Committed(t, k.Admin(t), cfg.Group, topic) {
		if off != 3 {
			t.Errorf("partition %d committed at %d, want 3", p, off)
		}
	}
}
