package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
)

// opsCluster hands the test a Kafka cluster (KAFKA_BROKERS when set, else
// kfake) with fresh topics named after bases (partitions each), and returns
// the broker list, a client that produces to explicit partitions, and the
// topic names.
func opsCluster(t *testing.T, partitions int32, bases ...string) (string, *kgo.Client, []string) {
	t.Helper()
	k := testkit.NewKafka(t, testkit.FakeOK())
	var names []string
	for _, b := range bases {
		names = append(names, k.Topic(t, b, partitions))
	}
	return strings.Join(k.Brokers, ","), k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())), names
}

func produceOps(t *testing.T, cl *kgo.Client, rs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// singleLine fails unless err is a short one-line error containing want.
func singleLine(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || len(msg) > 300 || !strings.Contains(msg, want) {
		t.Fatalf("error %q: want one short line containing %q", msg, want)
	}
}

func TestOpsCommandsUnreachableKafka(t *testing.T) {
	t.Parallel()
	cmds := [][]string{
		{"lag"},
		{"lag", "--group", "g"},
		{"replay", "--group", "g", "--topic", "t", "--to-earliest"},
		{"dlq", "inspect"},
		{"dlq", "redrive", "--dry-run"},
		{"dlq", "archive", "--once", "--database-url", "postgres://u@127.0.0.1:1/db"},
	}
	for _, args := range cmds {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := runCLI(t, append(args, "--brokers", "127.0.0.1:1")...)
			singleLine(t, err, "kafka unreachable at 127.0.0.1:1")
			if d := time.Since(start); d > 12*time.Second {
				t.Fatalf("took %v to give up", d)
			}
		})
	}
}

func TestOpsCommandsBadFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--group", "g", "--topic", "t"}, "at least one of the flags"},
		{[]string{"replay", "--group", "g", "--topic", "t", "--to-earliest", "--to-offset", "3"}, "none of the others can be"},
		{[]string{"replay", "--topic", "t", "--to-earliest"}, `required flag(s) "group" not set`},
		{[]string{"replay", "--group", "g", "--to-earliest"}, `required flag(s) "topic" not set`},
		{[]string{"replay", "--group", "g", "--topic", "t", "--to-time", "yesterday"}, "invalid --to-time"},
		{[]string{"replay", "--group", "g", "--topic", "t", "--to-offset", "-4"}, "invalid --to-offset -4"},
		{[]string{"replay", "--group", "g", "--topic", "t", "--to-time", "0"}, `invalid --to-time: "0" is a zero duration, i.e. now`},
		{[]string{"dlq", "redrive", "--since", "0s"}, `invalid --since: "0s" is a zero duration, i.e. now`},
		{[]string{"replay", "--group", "g", "--topic", "t", "--to-latest", "--partition", "x"}, "invalid argument"},
		{[]string{"lag", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"dlq", "inspect", "--limit", "-1"}, "invalid --limit -1"},
		{[]string{"dlq", "inspect", "--since", "last week"}, "invalid --since"},
		{[]string{"dlq", "inspect", "--since", "-1h", "--until", "-2h"}, "is not after --since"},
		{[]string{"dlq", "redrive", "--max-redrives", "0"}, "invalid --max-redrives 0"},
		{[]string{"dlq", "archive", "--database-url="}, "no database"},
		{[]string{"dlq", "inspect", "--topic", ""}, "empty --topic"},
		{[]string{"dlq", "redrive", "--topic", ""}, "empty --topic"},
		{[]string{"dlq", "archive", "--topic", "", "--database-url", "postgres://u@127.0.0.1:1/db"}, "empty --topic"},
		{[]string{"dlq", "archive", "--database-url", "postgres://u:pw@127.0.0.1:port/db"}, "invalid DATABASE_URL"},
	}
	for _, tc := range cases {
		_, err := runCLI(t, append(tc.args, "--brokers", "127.0.0.1:1")...)
		singleLine(t, err, tc.want)
		if strings.Contains(err.Error(), "unreachable") {
			t.Errorf("%v: connected before validating flags", tc.args)
		}
	}
}

func TestReplayAndLagCommands(t *testing.T) {
	t.Parallel()
	brokers, cl, names := opsCluster(t, 1, "cli.replay")
	topic, group, nobody := names[0], testkit.Name(t, "g"), testkit.Name(t, "nobody")
	// Recent: a real broker's time-based retention (7 days by default)
	// deletes older records within minutes, under the test.
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second).UTC()
	for i := range 10 {
		produceOps(t, cl, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte(fmt.Sprint(i)), Timestamp: t0.Add(time.Duration(i) * time.Second)})
	}
	adm := kadm.NewClient(cl)
	if err := adm.CommitAllOffsets(context.Background(), group, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 4, LeaderEpoch: -1}}}); err != nil {
		t.Fatal(err)
	}

	out, err := runCLI(t, "lag", "--brokers", brokers, "--group", group)
	if err != nil {
		t.Fatalf("lag: %v\n%s", err, out)
	}
	if !hasRow(out, group, topic, "0", "4", "10", "6") || !hasRow(out, group, "total", "(Empty,", "0", "members)", "6") {
		t.Fatalf("lag output:\n%s", out)
	}

	out, err = runCLI(t, "replay", "--brokers", brokers, "--group", group, "--topic", topic, "--to-time", t0.Add(7*time.Second).Format(time.RFC3339), "--dry-run")
	if err != nil {
		t.Fatalf("replay dry run: %v\n%s", err, out)
	}
	if !hasRow(out, "TOPIC", "PARTITION", "CURRENT", "NEW") || !hasRow(out, topic, "0", "4", "7") || !strings.Contains(out, "dry run") {
		t.Fatalf("replay dry run output:\n%s", out)
	}
	out, _ = runCLI(t, "lag", "--brokers", brokers, "--group", group)
	if !hasRow(out, group, topic, "0", "4", "10", "6") {
		t.Fatalf("dry run moved the group:\n%s", out)
	}
	// A time after the last record moves to the end, and the plan says why.
	out, err = runCLI(t, "replay", "--brokers", brokers, "--group", group, "--topic", topic, "--to-time", t0.Add(time.Hour).Format(time.RFC3339), "--dry-run")
	if err != nil || !hasRow(out, "TOPIC", "PARTITION", "CURRENT", "NEW", "NOTE") || !hasRow(out, topic, "0", "4", "10", "no", "record", "at", "or", "after", "the", "time:") {
		t.Fatalf("replay dry run after the last record: %v\n%s", err, out)
	}

	out, err = runCLI(t, "replay", "--brokers", brokers, "--group", group, "--topic", topic, "--partition", "0", "--to-earliest")
	if err != nil || !hasRow(out, topic, "0", "4", "0") || !strings.Contains(out, "moved to earliest") {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	if strings.Contains(out, "warning") {
		t.Fatalf("replay of a committed topic warned:\n%s", out)
	}
	// A group without commits is seeded, with a warning naming it and the topic.
	fresh := testkit.Name(t, "fresh")
	out, err = runCLI(t, "replay", "--brokers", brokers, "--group", fresh, "--topic", topic, "--to-offset", "3")
	if err != nil || !hasRow(out, topic, "0", "-", "3") || !strings.Contains(out, fmt.Sprintf("warning: group %q had no committed offset on %q", fresh, topic)) {
		t.Fatalf("replay of a new group: %v\n%s", err, out)
	}
	out, _ = runCLI(t, "lag", "--brokers", brokers, "--group", fresh)
	if !hasRow(out, fresh, topic, "0", "3", "10", "7") {
		t.Fatalf("lag of the seeded group:\n%s", out)
	}
	out, _ = runCLI(t, "lag", "--brokers", brokers, "--group", group)
	if !hasRow(out, group, topic, "0", "0", "10", "10") {
		t.Fatalf("lag after replay:\n%s", out)
	}

	// A live member makes replay refuse with one line naming the group.
	member, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for member.PollFetches(ctx).NumRecords() == 0 && ctx.Err() == nil {
	}
	_, err = runCLI(t, "replay", "--brokers", brokers, "--group", group, "--topic", topic, "--to-latest")
	singleLine(t, err, fmt.Sprintf(`group %q has 1 active members; stop them before replaying`, group))

	// A named group that does not exist fails lag after the table.
	out, err = runCLI(t, "lag", "--brokers", brokers, "--group", nobody)
	singleLine(t, err, nobody)
	if !strings.Contains(out, nobody) {
		t.Fatalf("lag output lacks the missing group:\n%s", out)
	}
}

// A pipeline named twice fails in one line before anything connects (it
// would register its metrics and ops routes twice).
func TestRunPipelineNamedTwice(t *testing.T) {
	_, err := runCLI(t, "run", "smap", "silver", "smap", "--brokers", "127.0.0.1:1")
	singleLine(t, err, `pipeline "smap" is named twice`)
}

// Invalid values of run's environment variables fail the command in one
// line before it connects, instead of being ignored.
func TestRunBadEnvironment(t *testing.T) {
	for env, val := range map[string]string{"SILVER_WINDOW_KEYS": "many", "SILVER_WINDOW_TOTAL_KEYS": "lots", "BACKLOG_THRESHOLD": "1x"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, val)
			_, err := runCLI(t, "run", "silver", "--brokers", "127.0.0.1:1")
			singleLine(t, err, "invalid "+env+"=")
		})
	}
}
