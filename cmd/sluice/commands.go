package main

import "github.com/spf13/cobra"

// subcommands lists every subcommand. Each lives in its own file as a
// constructor taking the shared *globalConfig.
func subcommands(g *globalConfig) []*cobra.Command {
	return []*cobra.Command{
		newRunCmd(g),
		newDemoCmd(g),
		newTopicsCmd(g),
		newMigrateCmd(g),
		newReplayCmd(g),
		newLagCmd(g),
		newDLQCmd(g),
		newSmapCmd(g),
		newIngestCmd(g),
		newVersionCmd(g),
		newConsoleCmd(g),
		newTradesCmd(g),
		newModulesCmd(g),
	}
}

// commandGroup returns a command that only groups the subcommands subs
// under use (it runs nothing itself: without a subcommand it prints its
// help).
func commandGroup(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short}
	cmd.AddCommand(subs...)
	return cmd
}
