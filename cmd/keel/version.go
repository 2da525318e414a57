package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "keel %s (%s, %s %s/%s)\n",
				version, revision(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

// revision returns the VCS revision the binary was built from, if known.
func revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown revision"
	}
	rev, dirty := "unknown revision", ""
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
			if len(rev) > 12 {
				rev = rev[:12]
			}
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	return rev + dirty
}
