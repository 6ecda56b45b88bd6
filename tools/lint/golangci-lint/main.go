// Command golangci-lint is golangci-lint (the version tools/lint/go.mod
// requires) with logcheck (sigs.k8s.io/logtools) compiled in as a module
// plugin, as `golangci-lint custom` would build it, without that command's
// git clone: one binary and one load of the packages for both linters.
// .golangci.yml enables logcheck under linters.settings.custom.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/golangci/golangci-lint/v2/pkg/commands"
	"github.com/golangci/golangci-lint/v2/pkg/exitcodes"
	_ "sigs.k8s.io/logtools/logcheck/gclplugin"
)

// golangciModule is the module whose version `golangci-lint version` reports.
const golangciModule = "github.com/golangci/golangci-lint/v2"

func main() {
	info := commands.BuildInfo{Version: "unknown", Commit: "logcheck plugin", Date: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info.GoVersion = bi.GoVersion
		for _, dep := range bi.Deps {
			switch dep.Path {
			case golangciModule:
				info.Version = dep.Version
			case "sigs.k8s.io/logtools":
				info.Commit = "logcheck plugin " + dep.Version
			}
		}
	}
	if err := commands.Execute(info); err != nil {
		fmt.Fprintf(os.Stderr, "The command is terminated due to an error: %v\n", err)
		os.Exit(exitcodes.Failure)
	}
}
