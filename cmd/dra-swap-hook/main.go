// Command dra-swap-hook is the OCI hook that the dra.swap CDI specs run:
// as a createRuntime hook it sets the container's cgroup swap limit, as a
// poststop hook (--cleanup) it removes the hook's state for the container.
// On any failure it prints one line to stderr and exits 1, so the container
// fails to start, visibly.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dra-driver-swap/dra-driver-swap/pkg/hook"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stderr))
}

func run(args []string, stdin io.Reader, stderr io.Writer) int {
	if err := hook.Run(args, stdin); err != nil {
		fmt.Fprintf(stderr, "dra-swap-hook: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 1
	}
	return 0
}
