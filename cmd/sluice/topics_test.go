package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/topics"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runCLI runs the sluice root command with args and returns its output.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := execute(ctx, root)
	return out.String(), err
}

func TestTopicsEnsureAndList(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := strings.Join(c.ListenAddrs(), ",")
	const prefix = "cli."

	out, err := runCLI(t, "topics", "ensure", "--brokers", brokers, "--prefix", prefix, "--partitions-override", "ingest.tasks=4")
	if err != nil {
		t.Fatalf("ensure: %v\n%s", err, out)
	}
	nTopics := len(topics.Catalog())
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != nTopics+1 || !strings.HasPrefix(lines[0], "TOPIC") {
		t.Fatalf("ensure printed %d lines:\n%s", len(lines), out)
	}
	for _, want := range []string{"cli.bronze.records", "cli.ingest.jobs", "cli.modules.state"} {
		if !strings.Contains(out, want) {
			t.Errorf("ensure output lacks %s", want)
		}
	}
	if n := strings.Count(out, " created "); n != nTopics {
		t.Errorf("%d created rows, want %d:\n%s", n, nTopics, out)
	}
	if !hasRow(out, "cli.ingest.jobs", "created", "partitions=4,") {
		t.Errorf("override not applied to the co-partitioned pair:\n%s", out)
	}

	out, err = runCLI(t, "topics", "ensure", "--brokers", brokers, "--prefix", prefix, "--partitions-override", "ingest.tasks=4")
	if err != nil {
		t.Fatalf("second ensure: %v\n%s", err, out)
	}
	if n := strings.Count(out, " ok "); n != nTopics {
		t.Errorf("second ensure: %d ok rows, want %d:\n%s", n, nTopics, out)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 7 {
		r := &kgo.Record{Topic: "cli.bronze.records", Key: []byte(fmt.Sprint(i)), Value: []byte(`{}`)}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	out, err = runCLI(t, "topics", "list", "--brokers", brokers, "--prefix", prefix, "-v", "bronze.records", "nope")
	if err != nil {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if !hasRow(out, "cli.bronze.records", "6", "delete", "7d", "7") || !hasRow(out, "cli.nope", "-", "missing", "-", "-") {
		t.Errorf("list output:\n%s", out)
	}
	if n := strings.Count(out, "  partition "); n != 6 {
		t.Errorf("-v printed %d partition rows, want 6:\n%s", n, out)
	}
}

// hasRow reports whether a line of out starts with the given fields.
func hasRow(out string, fields ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= len(fields) && slices.Equal(f[:len(fields)], fields) {
			return true
		}
	}
	return false
}

func TestTopicsEnsureWarningsFail(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(9, "w.bronze.records"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out, err := runCLI(t, "topics", "ensure", "--brokers", strings.Join(c.ListenAddrs(), ","), "--prefix", "w.")
	if err == nil || !strings.Contains(err.Error(), "1 warning(s)") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(out, "has 9 partitions, catalog wants 6") {
		t.Errorf("warning row missing:\n%s", out)
	}
}

func TestTopicsBadOverride(t *testing.T) {
	t.Parallel()
	for _, o := range []string{"bronze.records", "bronze.records=0", "=3", "no.such=3"} {
		_, err := runCLI(t, "topics", "ensure", "--brokers", "127.0.0.1:1", "--partitions-override", o)
		if err == nil {
			t.Errorf("override %q accepted", o)
		}
	}
}

// An empty topic name is a usage error, found before Kafka is contacted:
// list used to print a "missing" row for it and exit 0.
func TestTopicsListEmptyName(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{""}, {"bronze.records", " "}, {"", "--prefix", "p."}} {
		out, err := runCLI(t, append([]string{"topics", "list", "--brokers", "127.0.0.1:1"}, args...)...)
		singleLine(t, err, "empty topic name")
		if out != "" {
			t.Errorf("list %q printed %q, want nothing", args, out)
		}
	}
}

// Two --partitions-override that give one topic different counts, directly
// or through its co-partitioned group, are refused before Kafka is
// contacted, naming the topic and both values; ensure used to apply the
// last one silently. Overrides that agree are accepted.
func TestTopicsEnsureContradictoryOverrides(t *testing.T) {
	t.Parallel()
	cases := []struct {
		overrides []string
		want      string
	}{
		{[]string{"ingest.tasks=4", "ingest.tasks=8"}, "contradictory --partitions-override for topic ingest.tasks: 4 (ingest.tasks=4) and 8 (ingest.tasks=8)"},
		{[]string{"ingest.tasks=4", "ingest.jobs=8"}, "contradictory --partitions-override for topic ingest.jobs: 4 (ingest.tasks=4) and 8 (ingest.jobs=8)"},
		{[]string{"ingest.jobs=3", "bronze.records=2", "ingest.tasks=5"}, "for topic ingest.tasks: 3 (ingest.jobs=3) and 5 (ingest.tasks=5)"},
		{[]string{"ingest.tasks=4", "ingest.jobs=4", "ingest.tasks=4"}, "kafka unreachable"},
	}
	for _, tc := range cases {
		args := []string{"topics", "ensure", "--brokers", "127.0.0.1:1"}
		for _, o := range tc.overrides {
			args = append(args, "--partitions-override", o)
		}
		out, err := runCLI(t, args...)
		singleLine(t, err, tc.want)
		if out != "" {
			t.Errorf("%v printed %q, want nothing", tc.overrides, out)
		}
	}
}

// A --timeout of zero or less would fail every command with a bare
// "context deadline exceeded" once connected; it is refused up front, before
// Kafka is contacted, naming the flag.
func TestTimeoutMustBePositive(t *testing.T) {
	t.Parallel()
	cmds := [][]string{
		{"topics", "ensure"},
		{"topics", "list"},
		{"lag"},
		{"replay", "--group", "g", "--topic", "t", "--to-earliest"},
		{"dlq", "inspect"},
		{"dlq", "redrive", "--dry-run"},
	}
	for _, args := range cmds {
		for _, d := range []string{"0", "-1s"} {
			start := time.Now()
			out, err := runCLI(t, append(args, "--brokers", "127.0.0.1:1", "--timeout", d)...)
			if d == "0" {
				d = "0s"
			}
			singleLine(t, err, "invalid --timeout "+d+" (want > 0)")
			if out != "" {
				t.Errorf("%v --timeout %s printed %q, want nothing", args, d, out)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("%v --timeout %s took %v to fail: validated after connecting", args, d, el)
			}
		}
	}
}
