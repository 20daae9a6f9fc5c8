package smap

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/objstore"
)

// completionPutFails fails the first fails writes of a project meta object
// that records a completion (the completer's write), as an object store
// outage at completion would.
type completionPutFails struct {
	objstore.Store
	fails  atomic.Int64
	failed atomic.Int64
}

func (s *completionPutFails) Put(ctx context.Context, key string, data []byte, ct string) error {
	var m projectMeta
	if json.Unmarshal(data, &m) == nil && !m.CompletedAt.IsZero() && s.fails.Add(-1) >= 0 {
		s.failed.Add(1)
		return errors.New("injected: object store unavailable")
	}
	return s.Store.Put(ctx, key, data, ct)
}

// A failed write of the completion time is retried until the project's
// meta object records it, and the completion is published once.
func TestCompletionRecordedAfterObjectStoreFailures(t *testing.T) {
	t.Parallel()
	pgs := testkit.NewPostgresServer(t)
	h := newHarness(t, pgs, harnessOpts{})
	fs := &completionPutFails{Store: h.objects}
	fs.fails.Store(3)
	h.objects = fs
	h.start(h.cfg)
	const project, n = "p-meta", 12
	h.createProject(ProjectCreated{ProjectID: project, Targets: []Target{synthetic("tiktok", n)}})
	h.waitDone(project, 60*time.Second)
	var meta projectMeta
	testkit.WaitFor(t, 60*time.Second, "completed_at in the project's meta object", func() bool {
		var err error
		meta, err = readMeta(testkit.Context(t), h.objects, project)
		return err == nil && !meta.CompletedAt.IsZero()
	})
	if got := fs.failed.Load(); got != 3 {
		t.Fatalf("%d completion writes failed, want the 3 injected", got)
	}
	if cs := h.completions(project); len(cs) != 1 {
		t.Fatalf("%d job.completed for the project, want 1", len(cs))
	}
}
