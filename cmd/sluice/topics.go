package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/topics"
)

// kafkaConnectTimeout bounds how long a command waits for the first broker
// to answer before it reports Kafka as unreachable.
const kafkaConnectTimeout = connectTimeout

func newTopicsCmd(g *globalConfig) *cobra.Command {
	return commandGroup("topics", "Create, align and inspect the topic catalog",
		newTopicsEnsureCmd(g), newTopicsListCmd(g))
}

func newTopicsEnsureCmd(g *globalConfig) *cobra.Command {
	var (
		overrides []string
		prefix    string
		rf        int16
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "ensure",
		Short: "Create missing catalog topics and align partitions and configs",
		Long: `ensure creates every catalog topic that is missing, sets the configs the
catalog manages (cleanup.policy, retention.ms and compaction settings) where
they differ, and grows topics that have fewer partitions than the catalog.
It never reduces partitions: such differences, and co-partitioned topics with
different partition counts, are printed as warnings and make the command exit
non-zero. Running it twice prints only "ok".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkTimeout(timeout); err != nil {
				return err
			}
			opts := []topics.Option{topics.WithPrefix(prefix), topics.WithReplicationFactor(rf)}
			for _, o := range overrides {
				name, n, err := parsePartitionOverride(o)
				if err != nil {
					return err
				}
				opts = append(opts, topics.WithPartitions(name, n))
			}
			specs, err := topics.Select(topics.Catalog(), opts...)
			if ce, ok := errors.AsType[*topics.ConflictError](err); ok {
				return fmt.Errorf("contradictory --partitions-override for topic %s: %d (%s=%d) and %d (%s=%d)", ce.Topic,
					ce.First.Partitions, ce.First.Name, ce.First.Partitions, ce.Second.Partitions, ce.Second.Name, ce.Second.Partitions)
			}
			if err != nil {
				return err
			}
			adm, ctx, done, err := kafkaAdminFor(cmd.Context(), g, timeout)
			if err != nil {
				return err
			}
			defer done()
			changes, err := topics.Ensure(ctx, adm, specs)
			printChanges(cmd.OutOrStdout(), changes)
			if err != nil {
				return err
			}
			if w := topics.Warnings(changes); len(w) > 0 {
				return fmt.Errorf("%d warning(s): the cluster differs from the catalog in ways ensure does not repair", len(w))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&overrides, "partitions-override", nil, "partition count for a catalog topic as name=n (repeatable; co-partitioned topics follow; contradictory counts for one topic are refused)")
	f.StringVar(&prefix, "prefix", "", "prefix every topic name (isolates test runs on a shared cluster)")
	f.Int16Var(&rf, "replication-factor", -1, "replication factor for created topics (-1 = broker default)")
	f.DurationVar(&timeout, "timeout", time.Minute, "time limit for the whole operation once connected")
	return g.withServiceFlags(cmd, kafkaFlags)
}

func newTopicsListCmd(g *globalConfig) *cobra.Command {
	var (
		prefix  string
		all     bool
		verbose bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "list [names...]",
		Short: "Show partitions, policy, retention and record counts of topics",
		Long: `list shows the catalog topics (or the named ones, or with --all every topic
on the cluster): partition count, cleanup policy, retention and the records
currently retained (end offset minus start offset, summed over partitions;
an upper bound on compacted topics). -v adds per-partition offsets. The
prefix is prepended to catalog and named topics alike.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTimeout(timeout); err != nil {
				return err
			}
			var names []string
			switch {
			case all && len(args) > 0:
				return errors.New("--all and topic names are mutually exclusive")
			case all:
			case len(args) > 0:
				for _, a := range args {
					if strings.TrimSpace(a) == "" {
						return errors.New("empty topic name")
					}
					names = append(names, prefix+a)
				}
			default:
				specs, err := topics.Select(topics.Catalog(), topics.WithPrefix(prefix))
				if err != nil {
					return err
				}
				names = topics.Names(specs)
			}
			adm, ctx, done, err := kafkaAdminFor(cmd.Context(), g, timeout)
			if err != nil {
				return err
			}
			defer done()
			infos, err := topics.List(ctx, adm, names)
			if err != nil {
				return err
			}
			printInfos(cmd.OutOrStdout(), infos, verbose)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&prefix, "prefix", "", "prefix of the topic names")
	f.BoolVar(&all, "all", false, "list every non-internal topic on the cluster")
	f.BoolVarP(&verbose, "verbose", "v", false, "show per-partition start and end offsets")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "time limit for the whole operation once connected")
	return g.withServiceFlags(cmd, kafkaFlags)
}

// kafkaOpts checks within kafkaConnectTimeout that Kafka answers and
// returns the connection options for clients the caller creates itself.
func kafkaOpts(ctx context.Context, g *globalConfig) ([]kgo.Opt, error) {
	_, closeFn, err := kafkaAdmin(ctx, g)
	if err != nil {
		return nil, err
	}
	closeFn()
	return g.Kafka.Opts()
}

// kafkaAdmin connects to Kafka and checks within kafkaConnectTimeout that a
// broker answers, so that an unreachable cluster is one error line, not a hang.
func kafkaAdmin(ctx context.Context, g *globalConfig) (*kadm.Client, func(), error) {
	if err := g.needKafka(); err != nil {
		return nil, nil, err
	}
	opts, err := g.Kafka.Opts()
	if err != nil {
		return nil, nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, kafkaConnectTimeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
		if pctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", kafkaConnectTimeout)
		}
		return nil, nil, fmt.Errorf("kafka unreachable at %s: %w", strings.Join(g.Kafka.Brokers, ","), err)
	}
	return kadm.NewClient(cl), cl.Close, nil
}

func parsePartitionOverride(s string) (string, int32, error) {
	name, v, ok := strings.Cut(s, "=")
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if !ok || strings.TrimSpace(name) == "" || err != nil || n < 1 {
		return "", 0, fmt.Errorf("invalid --partitions-override %q (want topic=n with n ≥ 1)", s)
	}
	return strings.TrimSpace(name), int32(n), nil
}

func printChanges(w io.Writer, changes []topics.Change) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tACTION\tDETAIL")
	for _, c := range changes {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Topic, c.Action, c.Detail)
	}
	_ = tw.Flush()
}

func printInfos(w io.Writer, infos []topics.Info, verbose bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tPOLICY\tRETENTION\tRECORDS")
	for _, in := range infos {
		if !in.Exists {
			fmt.Fprintf(tw, "%s\t-\tmissing\t-\t-\n", in.Topic)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\n", in.Topic, in.Partitions, in.Cleanup, formatRetention(in.Retention), in.Records)
		if verbose {
			for _, o := range in.Offsets {
				fmt.Fprintf(tw, "  partition %d\t\tstart %d\tend %d\t%d\n", o.Partition, o.Start, o.End, o.End-o.Start)
			}
		}
	}
	_ = tw.Flush()
}

func formatRetention(d time.Duration) string {
	switch {
	case d == topics.Infinite:
		return "infinite"
	case d <= 0:
		return "default"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	default:
		return d.String()
	}
}

// kafkaAdminFor is kafkaAdmin for a command bounded by timeout: it returns
// the admin client, a context that ends after timeout, and done, which
// ends that context and closes the client.
func kafkaAdminFor(ctx context.Context, g *globalConfig, timeout time.Duration) (*kadm.Client, context.Context, func(), error) {
	adm, closeFn, err := kafkaAdmin(ctx, g)
	if err != nil {
		return nil, nil, nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	return adm, tctx, func() { cancel(); closeFn() }, nil
}
