package smap

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/progress"
	"github.com/sluicehq/sluice/stages/run"
)

// A collector sleeping in a crawl's backoff (a 25 s Retry-After) lets go of
// its project.created record at once when its partition is revoked or the
// process shuts down, instead of holding the rebalance or the shutdown for
// the runtime's 20 s RevokeTimeout; the record is neither committed nor
// dead-lettered, and the next owner crawls the project to completion.
func TestCrawlBackoffEndsOnRevokeAndStop(t *testing.T) {
	pgs := testkit.NewPostgresServer(t)
	h := newHarness(t, pgs, harnessOpts{})
	h.cfg.ProjectCreatedTopic = h.k.Topic(t, "pc2", 2)
	h.cfg.Runtime.RevokeTimeout = 20 * time.Second
	h.cfg.CrawlRetry = run.RetryPolicy{MaxAttempts: 4, Initial: 10 * time.Millisecond, Max: 30 * time.Second}
	// Bounds well under RevokeTimeout, generous for a slow shared machine.
	const revokeBound, stopBound = 10 * time.Second, 5 * time.Second

	stuck := h.cfg
	backingOff := make(chan string, 16)
	stuck.Crawler = crawlerFunc(func(_ context.Context, p ProjectCreated, tg Target, emit func(Item) error) error {
		// The first item of the synthetic crawl the next owner makes.
		if err := emit(Item{SourceID: platformSlug(tg.Platform) + "-00000", Platform: tg.Platform, Text: "first"}); err != nil {
			return err
		}
		backingOff <- p.ProjectID
		return stages.RetryAfter(25*time.Second, errors.New("429 Too Many Requests"))
	})
	d1 := h.start(stuck)

	// One project per partition, so that a second member takes one of them.
	ids := []string{"p-stop-a", "p-stop-b"}
	pcl := h.k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i, id := range ids {
		b, err := json.Marshal(NewProjectCreated(ProjectCreated{ProjectID: id, Targets: []Target{synthetic("tiktok", 3)}}, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: h.cfg.ProjectCreatedTopic, Partition: int32(i), Key: []byte(id), Value: b}
		if err := pcl.ProduceSync(testkit.Context(t), rec).FirstErr(); err != nil {
			t.Fatalf("produce project.created: %v", err)
		}
	}
	waiting := map[string]bool{}
	for len(waiting) < len(ids) {
		select {
		case id := <-backingOff:
			waiting[id] = true
		case <-time.After(60 * time.Second):
			t.Fatalf("crawls in backoff: %v, want both projects", waiting)
		}
	}

	// Revoke: a second member (whose crawler succeeds) joins; the first
	// gives up one partition, whose project the second then completes.
	start := time.Now()
	h.start(h.cfg)
	done := func(id string) bool { return h.state(id).Status == progress.StatusDone }
	var moved, left string
	testkit.WaitFor(t, 90*time.Second, "one project completed by the new member", func() bool {
		switch {
		case done(ids[0]):
			moved, left = ids[0], ids[1]
		case done(ids[1]):
			moved, left = ids[1], ids[0]
		}
		return moved != ""
	})
	if d := time.Since(start); d > revokeBound {
		t.Errorf("the new member completed %s %v after it started, want < %v: the revoke waited for the backoff", moved, d.Round(time.Millisecond), revokeBound)
	}
	if st := h.state(left); st.Status == progress.StatusDone || st.Sealed {
		t.Fatalf("%s is still backing off on the first member, yet its state is %+v", left, st)
	}

	// Shutdown: the first member stops at once; the second takes over.
	start = time.Now()
	d1.stop()
	if d := time.Since(start); d > stopBound {
		t.Errorf("stopping the member in backoff took %v, want < %v", d.Round(time.Millisecond), stopBound)
	}
	h.waitDone(left, 90*time.Second)

	for _, id := range ids {
		if st := h.state(id); st.Total != 3 || st.Done != 3 || st.Errors != 0 {
			t.Errorf("%s: final state %+v, want total=done=3 errors=0", id, st)
		}
		if cs := h.completions(id); len(cs) != 1 || cs[0].Total != 3 {
			t.Errorf("%s: completions %+v, want one with total 3", id, cs)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "collector caught up", func() bool { return h.caughtUp(h.cfg.CollectorGroup, h.cfg.ProjectCreatedTopic) })
	if n := h.count(h.cfg.AnalyticsErrorsTopic); n != 0 {
		t.Errorf("%d DLQ records, want none", n)
	}
}
