package e2e

import (
	"embed"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/conformance"
)

// sources are the suite's test files, which the conformance list is read
// from (conformance.List): the compiled suite prints the list of the
// source it was built from.
//
//go:embed *_test.go
var sources embed.FS

// TestMain: `e2e.test -list-conformance` prints what the conformance suite
// (E2E_CONFORMANCE=1) runs and skips, as docs/conformance.md shows it, and
// runs no test.
func TestMain(m *testing.M) {
	list := flag.Bool("list-conformance", false, "print the tests of the conformance suite (E2E_CONFORMANCE=1): what each checks, and which it skips and why; run none")
	flag.Parse()
	if *list {
		tests, err := conformance.List(sources)
		if err != nil {
			fmt.Fprintln(os.Stderr, "list-conformance:", err)
			os.Exit(1)
		}
		fmt.Print(conformance.Markdown(tests))
		os.Exit(0)
	}
	os.Exit(m.Run())
}
