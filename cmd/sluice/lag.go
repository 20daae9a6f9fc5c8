package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/groupctl"
)

func newLagCmd(g *globalConfig) *cobra.Command {
	var (
		groups  []string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "lag [--group G ...]",
		Short: "Show committed offset, end offset and lag per consumer group and partition",
		Long: `lag prints, for each consumer group (every group the cluster knows unless
--group names some), the committed offset, end offset and lag of every
partition it consumes or committed to, then the total per topic and per
group. A partition without a commit shows "-" and counts its lag from the
log start. A named group that does not exist makes the command exit
non-zero after printing the others.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkTimeout(timeout); err != nil {
				return err
			}
			adm, ctx, done, err := kafkaAdminFor(cmd.Context(), g, timeout)
			if err != nil {
				return err
			}
			defer done()
			rep, err := groupctl.Lag(ctx, adm, groups...)
			if err != nil {
				return err
			}
			if err := printLag(cmd.OutOrStdout(), rep); err != nil {
				return err
			}
			return rep.Err()
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&groups, "group", nil, "consumer group; repeat for several (default: every group)")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "time limit for the operation once connected")
	return g.withServiceFlags(cmd, kafkaFlags)
}

func printLag(w io.Writer, rep groupctl.Report) error {
	if len(rep.Groups) == 0 {
		_, err := fmt.Fprintln(w, "no consumer groups")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCOMMITTED\tEND\tLAG")
	for _, gl := range rep.Groups {
		if gl.Err != nil {
			fmt.Fprintf(tw, "%s\t\t\t\t\terror: %v\n", gl.Group, gl.Err)
			continue
		}
		for _, p := range gl.Partitions {
			lag := fmt.Sprint(p.Lag)
			if p.Err != nil {
				lag = "error: " + p.Err.Error()
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", gl.Group, p.Topic, p.Partition, offsetText(p.Committed), offsetText(p.End), lag)
		}
		for _, t := range gl.Topics {
			fmt.Fprintf(tw, "%s\t%s\ttotal\t\t\t%d\n", gl.Group, t.Topic, t.Lag)
		}
		fmt.Fprintf(tw, "%s\ttotal (%s, %d members)\t\t\t\t%d\n", gl.Group, gl.State, gl.Members, gl.Total)
	}
	return tw.Flush()
}
