package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// shutdownTimeout bounds how long the registry waits for requests in flight
// once it is told to stop.
const shutdownTimeout = 10 * time.Second

func runRegistry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("registry", flag.ContinueOnError)
	flags.SetOutput(stderr)
	addr := flags.String("addr", "", "HOST:PORT to listen on, a loopback address unless -allow-remote (required)")
	dir := flags.String("dir", "", "directory for the blobs; manifests live in memory, so push again after a restart (required)")
	allowRemote := flags.Bool("allow-remote", false, "allow listening on an address other than loopback")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if *addr == "" || *dir == "" {
		return errors.New("registry: -addr and -dir are required")
	}
	if err := checkListenAddr(*addr, *allowRemote); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("registry: creating the blob directory: %w", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	fmt.Fprintf(stdout, "registry serving http://%s, blobs in %s\n", ln.Addr(), *dir)
	return serveRegistry(ctx, ln, *dir, stderr)
}

// checkListenAddr refuses an address that is not loopback unless
// allowRemote: an empty host means every interface.
func checkListenAddr(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", addr, err)
	}
	if allowRemote || isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("-addr %q is not a loopback address (127.0.0.1, ::1, localhost); pass -allow-remote to listen on it", addr)
}

// serveRegistry serves the OCI distribution API on ln, blobs in dir, one
// log line per request to logw, until ctx ends; then it stops accepting,
// waits for requests in flight and returns nil.
func serveRegistry(ctx context.Context, ln net.Listener, dir string, logw io.Writer) error {
	logger := log.New(logw, "registry: ", log.LstdFlags)
	srv := &http.Server{
		Handler: registry.New(
			registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)),
			registry.Logger(logger),
		),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          logger,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("registry: serving %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("registry: shutting down %s: %w", ln.Addr(), err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("registry: serving %s: %w", ln.Addr(), err)
	}
	logger.Printf("stopped")
	return nil
}
