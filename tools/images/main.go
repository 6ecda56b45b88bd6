// Command dra-swap-images builds the driver's container image and the e2e
// tests' images without a Docker engine, pushes them to a registry, and
// serves a registry for local clusters.
//
//	dra-swap-images build -out DIR -version V -revision R [-set driver|test|all] [-source URL] [-arch ARCH]
//	dra-swap-images push -from DIR -registry HOST[:PORT][/PATH] [-insecure]
//	dra-swap-images registry -addr HOST:PORT -dir DIR [-allow-remote] [-basic-auth FILE [-private PATH]]
//
// build compiles static binaries and packs each image from an empty base
// into an OCI image layout; the same sources give the same digests. push
// copies every image of a layout to HOST[:PORT][/PATH]/<name>:<tag>, with
// the docker config's credentials. registry serves the OCI distribution API
// (go-containerregistry's pkg/registry) with blobs on disk, until SIGTERM or
// SIGINT; with -basic-auth, to one user only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage:
  dra-swap-images build -out DIR -version V -revision R [-set driver|test|all] [-source URL] [-arch ARCH]
  dra-swap-images push -from DIR -registry HOST[:PORT][/PATH] [-insecure]
  dra-swap-images registry -addr HOST:PORT -dir DIR [-allow-remote] [-basic-auth FILE [-private PATH]]
Run a subcommand with -h for its flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintf(os.Stderr, "dra-swap-images: %v\n", err)
		os.Exit(1)
	}
}

// run executes the subcommand named by args[0]. Results go to stdout,
// progress and logs to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no subcommand given")
	}
	switch args[0] {
	case "build":
		return runBuild(ctx, args[1:], stdout, stderr)
	case "push":
		return runPush(ctx, args[1:], stdout, stderr)
	case "registry":
		return runRegistry(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown subcommand %q", args[0])
	}
}

// parseFlags parses a subcommand's flags and refuses positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}
