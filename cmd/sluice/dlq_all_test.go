package main

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A redrive without any filter re-sends the whole DLQ topic; it now needs
// --all (a --dry-run still lists everything), and sends nothing without it.
func TestDLQRedriveWithoutFilterNeedsAll(t *testing.T) {
	t.Parallel()
	brokers, dlqTopic, src := dlqFixture(t)
	srcEnd := func() int64 { return partitionZeroEnd(t, brokers, src) }
	args := []string{"dlq", "redrive", "--brokers", brokers, "--topic", dlqTopic}

	out, err := runCLI(t, args...)
	singleLine(t, err, "no filter: this would re-send every record of "+dlqTopic)
	if strings.Contains(out, "sent:") || srcEnd() != 0 {
		t.Fatalf("redrive without filter nor --all sent something (source end %d):\n%s", srcEnd(), out)
	}

	out, err = runCLI(t, append(args, "--dry-run")...)
	if err != nil || !strings.Contains(out, "would send: 3\n") || srcEnd() != 0 {
		t.Fatalf("dry run without filter: %v (source end %d)\n%s", err, srcEnd(), out)
	}

	out, err = runCLI(t, append(args, "--all")...)
	if err != nil || !strings.Contains(out, "sent: 3\n") || srcEnd() != 3 {
		t.Fatalf("redrive --all: %v (source end %d)\n%s", err, srcEnd(), out)
	}
}

// partitionZeroEnd returns the end offset of partition 0 of topic.
func partitionZeroEnd(t *testing.T, brokers, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := ends.Lookup(topic, 0)
	return o.Offset
}
