package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/schemas"
)

// databaseConnectTimeout bounds how long a command waits for PostgreSQL to
// accept a connection before it reports the database as unreachable.
const databaseConnectTimeout = 10 * time.Second

func newMigrateCmd(g *globalConfig) *cobra.Command {
	var status bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the SQL migrations to DATABASE_URL",
		Long: `migrate applies every pending migration (silver tables, control_flags,
dlq_archive, post_analytics) to the first schema of the connection's
search_path and prints the migrations it applied. --status prints every
migration and whether it is applied instead, changing nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.needDatabase(); err != nil {
				return err
			}
			cfg, err := postgresPoolConfig(g.DatabaseURL)
			if err != nil {
				return err
			}
			cctx, cancel := context.WithTimeout(cmd.Context(), databaseConnectTimeout)
			defer cancel()
			db, err := schemas.Open(cctx, g.DatabaseURL)
			if err != nil {
				if cctx.Err() != nil {
					err = fmt.Errorf("no answer within %v", databaseConnectTimeout)
				}
				return postgresError(cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
			}
			defer db.Close()
			out := cmd.OutOrStdout()

			if status {
				st, err := schemas.StatusDB(cmd.Context(), db)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "VERSION\tMIGRATION\tSTATE\tAPPLIED AT")
				for _, s := range st {
					state, at := "pending", "-"
					if s.Applied {
						state, at = "applied", s.AppliedAt.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Version, s.Name, state, at)
				}
				return tw.Flush()
			}

			applied, err := schemas.MigrateDB(cmd.Context(), db)
			for _, n := range applied {
				fmt.Fprintf(out, "applied %s\n", n)
			}
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintln(out, "schema up to date")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&status, "status", false, "show which migrations are applied instead of applying them")
	return g.withServiceFlags(cmd, postgresFlags)
}
