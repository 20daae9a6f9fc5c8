package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines/ticks"
)

func TestIngestTriggerAndStatus(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "it.ingest.tasks", "it.ingest.jobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := strings.Join(c.ListenAddrs(), ",")
	// status reads only the job-state topic: it takes no --tasks-topic.
	statusFlags := []string{"--brokers", brokers, "--jobs-topic", "it.ingest.jobs"}
	topicsFlags := append([]string{"--tasks-topic", "it.ingest.tasks"}, statusFlags...)

	out, err := runCLI(t, append([]string{"ingest", "trigger", "NQ", "2025-11-18", "--account", "U9"}, topicsFlags...)...)
	if err != nil || !strings.HasPrefix(out, "job NQ:2025-11-18 instance ") {
		t.Fatalf("trigger: %v\n%s", err, out)
	}
	if _, err := runCLI(t, append([]string{"ingest", "trigger", "nq", "2025-11-18"}, topicsFlags...)...); err == nil || !strings.Contains(err.Error(), "symbol") {
		t.Errorf("lower-case symbol: %v, want a symbol error", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("it.ingest.tasks"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fs := cl.PollFetches(ctx)
	recs := fs.Records()
	if len(recs) != 1 {
		t.Fatalf("%d task records, want 1", len(recs))
	}
	var task ticks.Task
	_ = json.Unmarshal(recs[0].Value, &task)
	if task.Kind != ticks.KindTrigger || task.AccountID != "U9" || task.EndTime <= task.StartTime || !strings.Contains(out, task.JobInstanceID) {
		t.Errorf("trigger record %s; output %s", recs[0].Value, out)
	}

	// A state record, then status.
	st := ticks.JobState{JobKey: "NQ:2025-11-18", Symbol: "NQ", Date: "2025-11-18", Status: ticks.StatusRunning, JobInstanceID: task.JobInstanceID,
		StartTime: task.StartTime, EndTime: task.EndTime, Cursor: task.StartTime + (task.EndTime-task.StartTime)/4, HeartbeatAt: time.Now().Add(-90 * time.Second).UnixMilli(),
		Segments: 3, Ticks: 2500, LastErrorType: "IB_504"}
	v, _ := json.Marshal(st)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "it.ingest.jobs", Key: []byte(st.JobKey), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, append([]string{"ingest", "status", "NQ:2025-11-18"}, statusFlags...)...)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "JOB") {
		t.Fatalf("status output:\n%s", out)
	}
	for _, want := range []string{"NQ:2025-11-18", "RUNNING", task.JobInstanceID, "25.0%", "1m30s", "2500", "IB_504"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("status row lacks %q: %s", want, lines[1])
		}
	}
	if _, err := runCLI(t, append([]string{"ingest", "status", "ES:2025-11-18"}, statusFlags...)...); err == nil {
		t.Error("status of an unknown job succeeded")
	}
	out, err = runCLI(t, append([]string{"ingest", "status", "--json"}, statusFlags...)...)
	var got ticks.JobState
	if err != nil || json.Unmarshal([]byte(strings.TrimSpace(out)), &got) != nil || got.Ticks != 2500 {
		t.Errorf("status --json: %v\n%s", err, out)
	}
}

// ingest trigger and status against an unreachable Kafka used to wait their
// whole 30 s and say only "context deadline exceeded"; they now fail within
// the connect timeout naming the brokers, and bad input still comes first.
func TestIngestUnreachableKafka(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"ingest", "trigger", "NQ", "2025-11-18"}, "kafka unreachable at 127.0.0.1:1"},
		{[]string{"ingest", "status"}, "kafka unreachable at 127.0.0.1:1"},
		{[]string{"ingest", "status", "NQ:2025-11-18"}, "kafka unreachable at 127.0.0.1:1"},
		{[]string{"ingest", "trigger", "nq", "2025-13-01"}, `symbol "nq": want 1-16 characters`},
		{[]string{"ingest", "trigger", "NQ", "2025-11-18", "--account", ""}, `account_id "": want 1-64 characters`},
		{[]string{"ingest", "status", "NQ"}, `job key "NQ": want SYMBOL:YYYY-MM-DD`},
		// A negative session length used to be replaced by 6h30m silently.
		{[]string{"ingest", "trigger", "NQ", "2025-11-18", "--session-length", "-5m"}, "invalid --session-length -5m0s (want ≥ 0"},
		{[]string{"ingest", "bootstrap", "--session-length", "-1s"}, "invalid --session-length -1s (want ≥ 0"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := runCLI(t, append(tc.args, "--brokers", "127.0.0.1:1")...)
			singleLine(t, err, tc.want)
			if d := time.Since(start); d > 12*time.Second {
				t.Fatalf("took %v to give up", d)
			}
		})
	}
}
