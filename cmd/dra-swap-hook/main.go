// Command dra-swap-hook is the OCI hook that the dra.swap CDI specs run:
// as a createRuntime hook it sets the container's cgroup swap limit, as a
// poststop hook (--cleanup) it removes the hook's state for the container.
// On any failure it prints one line to stderr and exits 1, so the container
// fails to start, visibly. `dra-swap-hook --version` prints its version.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dra-driver-swap/dra-driver-swap/internal/hook"
	"github.com/dra-driver-swap/dra-driver-swap/internal/version"
)

const name = "dra-swap-hook"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// --version is a form of its own, for people: no CDI spec writes it,
	// and with any other argument it is refused like any unknown flag
	// (internal/hookargs.ParseArgs).
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(stdout, version.Get().Line(name))
		return 0
	}
	if err := hook.Run(args, stdin); err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, strings.ReplaceAll(err.Error(), "\n", "; "))
		return 1
	}
	return 0
}
