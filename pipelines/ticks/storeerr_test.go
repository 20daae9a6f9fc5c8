package ticks_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
)

// deniedStore refuses every Put with S3 AccessDenied and counts them.
type deniedStore struct {
	objstore.Store
	puts atomic.Int32
}

func (s *deniedStore) Put(_ context.Context, key string, _ []byte, _ string) error {
	s.puts.Add(1)
	return fmt.Errorf("objstore: put %s: %w", key, minio.ErrorResponse{StatusCode: 403, Code: "AccessDenied", Message: "Access Denied.", BucketName: "bkt-denied"})
}

// A permanent object-store configuration error on a segment write stops
// the worker with a fatal error naming the code and bucket: one attempt,
// no FAILED job, no dead letter, the segment task not committed.
func TestStoreConfigErrorIsFatal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	ds := &deniedStore{Store: f.store}
	f.env.Objects = ds
	w, err := ticks.NewWorker(f.env, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testkit.Context(t), 60*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	testkit.WaitFor(t, 30*time.Second, "worker ready", w.Ready)
	res := f.trigger(t, "FPT")
	select {
	case err = <-errc:
	case <-time.After(45 * time.Second):
		cancel()
		<-errc
		t.Fatal("worker kept running after AccessDenied")
	}
	if err == nil || stages.Classify(err).Kind != stages.KindFatal {
		t.Fatalf("Run = %v, want a fatal error", err)
	}
	for _, s := range []string{"AccessDenied", "bkt-denied"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Run error %q does not name %s", err, s)
		}
	}
	if n := ds.puts.Load(); n != 1 {
		t.Errorf("%d segment writes, want 1 (no retry)", n)
	}
	if n := testkit.Metric(t, f.reg, "sluice_objstore_operations_total", "pipeline", "ticks", "op", "put", "result", "permanent_error"); n != 1 {
		t.Errorf("sluice_objstore_operations_total{pipeline=ticks,op=put,result=permanent_error} = %v, want 1", n)
	}
	if st := f.job(t, res.JobKey); st == nil || st.Status == ticks.StatusFailed {
		t.Errorf("job state %+v, want it not FAILED", st)
	}
	if recs := f.k.ReadTopic(t, f.cfg.DLQTopic, testkit.ReadCommitted()); len(recs) != 0 {
		t.Errorf("%d DLQ records, want none", len(recs))
	}
	adm := kadm.NewClient(f.k.Client(t))
	ends := testkit.EndOffsets(t, adm, f.cfg.TasksTopic)
	offs, err := adm.FetchOffsets(testkit.Context(t), f.cfg.Group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(f.cfg.TasksTopic, res.Partition); ok && o.Err == nil && o.At >= ends[res.Partition] {
		t.Errorf("tasks partition %d committed to %d of %d: the failed segment task was committed", res.Partition, o.At, ends[res.Partition])
	}
}
