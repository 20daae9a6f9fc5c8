package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionText describes the build bi: the main module's version ("(devel)"
// for a build from a checkout, vX.Y.Z for `go install …@vX.Y.Z`), the VCS
// commit and time when the build recorded them (`go build` in a git
// checkout does, unless -buildvcs=false), "+dirty" for uncommitted changes,
// and the Go version. ok is ReadBuildInfo's second result.
func versionText(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "sluice (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	commit := "commit unknown (built without VCS information)"
	if rev != "" {
		commit = "commit " + rev + dirty
		if at != "" {
			commit += " " + at
		}
	}
	return fmt.Sprintf("sluice %s, %s, %s", v, commit, bi.GoVersion)
}

// buildVersion is versionText of the running binary.
func buildVersion() string { return versionText(debug.ReadBuildInfo()) }

func newVersionCmd(_ *globalConfig) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version, VCS commit and Go version of this binary (same as --version)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), buildVersion())
			return err
		},
	}
}
