package topics_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/topics"
)

// bronzeSpec returns the catalog's bronze.records spec under prefix p.
func bronzeSpec(t *testing.T, p string) topics.Spec {
	t.Helper()
	specs, err := topics.Select(topics.Catalog(), topics.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.Name == p+topics.BronzeRecords {
			return s
		}
	}
	t.Fatal("no bronze.records in the catalog")
	return topics.Spec{}
}

// Several `topics ensure` at once (CI jobs, workers starting together) all
// succeed when a topic needs growing: only one grow wins, and a real broker
// refuses the others with INVALID_PARTITIONS because the topic already has
// the count they ask for.
func TestEnsureConcurrentGrow(t *testing.T) {
	t.Parallel()
	_, adm, p := cluster(t)
	ctx := testContext(t)
	spec := bronzeSpec(t, p)
	mustCreate(t, adm, spec.Name, 1, nil)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { _, errs[i] = topics.Ensure(ctx, adm, []topics.Spec{spec}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Ensure %d: %v", i, err)
		}
	}
	if n := partitionCount(t, adm, spec.Name); n != int(spec.Partitions) {
		t.Fatalf("%d partitions after concurrent Ensures, want %d", n, spec.Partitions)
	}
}

// The same race made deterministic on kfake (which, unlike Kafka, accepts a
// grow to the current count): while Ensure's grow is in flight another
// client grows the topic, and Ensure's request is refused as Kafka refuses
// it. Ensure reports the topic as ok, not as an error.
func TestEnsureGrowRefusedAfterConcurrentGrow(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	newAdm := func() *kadm.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return kadm.NewClient(cl)
	}
	adm, other := newAdm(), newAdm()
	ctx := testContext(t)
	spec := bronzeSpec(t, prefix(t))
	mustCreate(t, adm, spec.Name, 2, nil)

	var inner atomic.Bool
	var otherErr error
	c.ControlKey(int16(kmsg.CreatePartitions), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		if inner.Load() {
			return nil, nil, false // the other client's grow: handled normally
		}
		inner.Store(true)
		req := kr.(*kmsg.CreatePartitionsRequest)
		c.SleepControl(func() {
			var resps kadm.CreatePartitionsResponses
			resps, otherErr = other.UpdatePartitions(context.WithoutCancel(ctx), int(spec.Partitions), spec.Name)
			if otherErr == nil {
				otherErr = resps.Error()
			}
		})
		resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewCreatePartitionsResponseTopic()
			st.Topic = rt.Topic
			st.ErrorCode = kerr.InvalidPartitions.Code
			msg := fmt.Sprintf("Topic already has %d partitions.", rt.Count)
			st.ErrorMessage = &msg
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	changes, err := topics.Ensure(ctx, adm, []topics.Spec{spec})
	if otherErr != nil {
		t.Fatalf("the concurrent grow failed: %v", otherErr)
	}
	if !inner.Load() {
		t.Fatal("Ensure did not try to grow the topic")
	}
	if err != nil {
		t.Fatalf("Ensure after a concurrent grow: %v (changes %+v)", err, changes)
	}
	if len(changes) != 1 || changes[0].Action != topics.ActionOK {
		t.Fatalf("changes = %+v, want one ok", changes)
	}
	if n := partitionCount(t, adm, spec.Name); n != int(spec.Partitions) {
		t.Fatalf("%d partitions, want %d", n, spec.Partitions)
	}
}
