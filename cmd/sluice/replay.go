package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/groupctl"
	"github.com/sluicehq/sluice/stages/dlq"
)

func newReplayCmd(g *globalConfig) *cobra.Command {
	var (
		group      string
		topicNames []string
		partitions []int32
		earliest   bool
		latest     bool
		toOffset   int64
		toTime     string
		dryRun     bool
		timeout    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "replay --group G --topic T (--to-earliest | --to-latest | --to-offset N | --to-time T)",
		Short: "Move a stopped consumer group's offsets to replay or skip records",
		Long: `replay commits new offsets for a consumer group so that its next consumer
starts there: the earliest retained record, the end (skip everything), an
offset (clamped to the partition's range) or the first record at or after a
time; a partition without a record at or after that time moves to its end
(nothing of it is re-read), and the NOTE column says so, as it says when an
offset was clamped. --to-time takes RFC 3339 (2024-05-01T09:00:00Z) or a duration ago
(-1h, 90m). --partition restricts every --topic to those partitions.

The group must be stopped: replay refuses while it has members, because
their next commit would undo the replay. --dry-run prints the plan and
commits nothing. A topic on which the group had no committed offset (a new
group, or a topic it has not consumed) is replayed too, with a warning on
stderr: it seeds the group's start there, or, after a mistyped --group or
--topic, leaves offsets nobody uses.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkTimeout(timeout); err != nil {
				return err
			}
			to, err := replayTarget(cmd, earliest, latest, toOffset, toTime, time.Now())
			if err != nil {
				return err
			}
			req := groupctl.ReplayRequest{Group: group, Topics: topicNames, To: to, DryRun: dryRun}
			if len(partitions) > 0 {
				req.Partitions = map[string][]int32{}
				for _, t := range topicNames {
					req.Partitions[t] = partitions
				}
			}
			adm, ctx, done, err := kafkaAdminFor(cmd.Context(), g, timeout)
			if err != nil {
				return err
			}
			defer done()
			plan, err := groupctl.Replay(ctx, adm, req)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT\tNEW\tNOTE")
			for _, m := range plan.Moves {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", m.Topic, m.Partition, offsetText(m.Current), m.New, m.Note)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if fresh := uncommittedTopics(plan.Moves); len(fresh) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: group %s had no committed offset on %s (a new group or a topic it has not consumed; check --group and --topic for a typo)\n",
					strconv.Quote(plan.Group), strings.Join(fresh, ", "))
			}
			if plan.Committed {
				fmt.Fprintf(out, "group %s moved to %s\n", plan.Group, plan.To)
			} else {
				fmt.Fprintf(out, "dry run: group %s not changed\n", plan.Group)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&group, "group", "", "consumer group to move (required)")
	f.StringSliceVar(&topicNames, "topic", nil, "topic to replay; repeat for several (required)")
	f.Int32SliceVar(&partitions, "partition", nil, "only these partitions, e.g. 0,1 (empty: all)")
	f.BoolVar(&earliest, "to-earliest", false, "move to the earliest retained offset")
	f.BoolVar(&latest, "to-latest", false, "move to the end offset (skip every existing record)")
	f.Int64Var(&toOffset, "to-offset", 0, "move to this offset (clamped to each partition's range)")
	f.StringVar(&toTime, "to-time", "", "move to the first record at or after this time: RFC 3339 or a duration ago like -1h")
	f.BoolVar(&dryRun, "dry-run", false, "print the plan without committing it")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "time limit for the operation once connected")
	_ = cmd.MarkFlagRequired("group")
	_ = cmd.MarkFlagRequired("topic")
	targets := []string{"to-earliest", "to-latest", "to-offset", "to-time"}
	cmd.MarkFlagsMutuallyExclusive(targets...)
	cmd.MarkFlagsOneRequired(targets...)
	return g.withServiceFlags(cmd, kafkaFlags)
}

// uncommittedTopics names, quoted and in plan order, the topics none of
// whose moves had a committed offset before the replay.
func uncommittedTopics(moves []groupctl.Move) []string {
	committed := map[string]bool{}
	var order []string
	for _, m := range moves {
		if _, seen := committed[m.Topic]; !seen {
			order = append(order, m.Topic)
		}
		committed[m.Topic] = committed[m.Topic] || m.Current >= 0
	}
	var out []string
	for _, t := range order {
		if !committed[t] {
			out = append(out, strconv.Quote(t))
		}
	}
	return out
}

// replayTarget turns the --to-* flags into a target.
func replayTarget(cmd *cobra.Command, earliest, latest bool, offset int64, at string, now time.Time) (groupctl.Target, error) {
	switch {
	case earliest:
		return groupctl.Target{Kind: groupctl.Earliest}, nil
	case latest:
		return groupctl.Target{Kind: groupctl.Latest}, nil
	case cmd.Flags().Changed("to-offset"):
		if offset < 0 {
			return groupctl.Target{}, fmt.Errorf("invalid --to-offset %d (want ≥ 0)", offset)
		}
		return groupctl.Target{Kind: groupctl.Offset, Offset: offset}, nil
	case cmd.Flags().Changed("to-time"):
		t, err := dlq.ParseTime(at, now)
		if err != nil {
			return groupctl.Target{}, fmt.Errorf("invalid --to-time: %w", err)
		}
		return groupctl.Target{Kind: groupctl.Timestamp, Time: t}, nil
	}
	return groupctl.Target{}, errors.New("one of --to-earliest, --to-latest, --to-offset, --to-time is required")
}

// offsetText prints an offset, "-" for none.
func offsetText(o int64) string {
	if o < 0 {
		return "-"
	}
	return strconv.FormatInt(o, 10)
}
