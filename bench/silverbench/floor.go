package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/kconf"
)

// runConsume is the `consume` subcommand: it fetches n records of topic
// from the start (no consumer group, no decoding, no database) and exits.
// Timed from the parent, it is the floor of any pipeline fed by that topic
// on this machine.
func runConsume(args []string) error {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	brokers := fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "Kafka seed brokers")
	topic := fs.String("topic", "", "topic to read")
	n := fs.Int("n", 0, "records to read")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kc := kconf.FromEnv()
	kc.Brokers = kconf.SplitBrokers(*brokers)
	kopts, err := kc.Opts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(kopts, kgo.ConsumeTopics(*topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	got := 0
	for got < *n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		fs.EachError(func(_ string, _ int32, e error) { err = e })
		if err != nil {
			return err
		}
		got += fs.NumRecords()
	}
	return nil
}

// consumeFloor times a `consume` child process over the bronze topic.
func consumeFloor(ctx context.Context, cfg *config, topic string) (time.Duration, error) {
	exe, err := childExe(cfg, "consume-floor")
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, exe, "consume", "--brokers", strings.Join(cfg.brokers, ","), "--topic", topic, "--n", fmt.Sprint(cfg.n))
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("consume floor: %w", err)
	}
	return time.Since(start), nil
}
