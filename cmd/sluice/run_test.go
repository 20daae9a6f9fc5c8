package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/topics"
)

// run on a cluster without the pipeline's topics (sluice topics ensure was
// forgotten) used to join its consumer group and wait silently for ever; it
// now fails at once naming the missing topics.
func TestRunMissingTopics(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake()) // a private cluster: the catalog names are fixed
	pg := testkit.NewPostgres(t)
	start := time.Now()
	_, err := runCLI(t, "run", "silver", "--brokers", strings.Join(k.Brokers, ","), "--database-url", pg.URL, "--ops-addr", "")
	singleLine(t, err, "pipeline silver: topic(s) bronze.records, bronze.dlq, control.flags do not exist (run sluice topics ensure)")
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("took %v to fail", d)
	}

	// With the topics in place the same command runs until it is stopped.
	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{topics.BronzeRecords, topics.BronzeDLQ, topics.ControlFlags} {
		if _, err := k.Admin(t).CreateTopic(ctx, 1, -1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"run", "silver", "--brokers", strings.Join(k.Brokers, ","), "--database-url", pg.URL, "--ops-addr", "", "--log-level", "error"})
	rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start = time.Now()
	if err := execute(rctx, root); err != nil || time.Since(start) < 3*time.Second {
		t.Fatalf("run silver with its topics ended after %v: %v\n%s", time.Since(start), err, out.String())
	}
}

// A backlog threshold of 0 or less used to be replaced by 10 000 silently
// (silver's default); it is now refused before connecting.
func TestRunBadBacklogThreshold(t *testing.T) {
	for _, v := range []string{"0", "-1"} {
		_, err := runCLI(t, "run", "silver", "--brokers", "127.0.0.1:1", "--backlog-threshold", v)
		singleLine(t, err, "invalid backlog threshold "+v+" (--backlog-threshold or BACKLOG_THRESHOLD; want ≥ 1)")
	}
	t.Setenv("BACKLOG_THRESHOLD", "0")
	_, err := runCLI(t, "run", "silver", "--brokers", "127.0.0.1:1")
	singleLine(t, err, "invalid backlog threshold 0 (--backlog-threshold or BACKLOG_THRESHOLD; want ≥ 1)")
	// Only silver uses it: other pipelines ignore it.
	_, err = runCLI(t, "run", "ticks", "--brokers", "127.0.0.1:1")
	singleLine(t, err, "kafka unreachable at 127.0.0.1:1")
}
