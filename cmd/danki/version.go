package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time: -ldflags "-X main.version=v0.1.0". Without
// it, buildVersion reads what the go command recorded in the binary.
var version = ""

// buildVersion is the -ldflags version, else the module version `go install
// …@vX` records, else the VCS revision, else "dev".
func buildVersion(info *debug.BuildInfo, ok bool) string {
	if version != "" {
		return version
	}
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var revision, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision == "" {
		return "dev"
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if modified == "true" {
		revision += "-dirty"
	}
	return "dev-" + revision
}

// versionLine is what `danki version` and `danki --version` print.
func versionLine(v string) string {
	return fmt.Sprintf("danki %s (%s, %s/%s)\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the danki version",
		Long: `Print the danki version: the one set at build time (make build, make release),
else the module version "go install" recorded, else the VCS revision.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, ok := debug.ReadBuildInfo()
			_, err := fmt.Fprint(cmd.OutOrStdout(), versionLine(buildVersion(info, ok)))
			return err
		},
	}
}
