// Package httpserver is what every HTTP server of the kubelet plugin and
// the controller shares: a deadline on each phase of a request and of an
// idle connection, small headers, and a bound on the connections a server
// holds, in all and per remote address. Anyone who reaches a pod can
// connect to its servers (the plugin's metrics port is listed by a
// headless Service; the controller's webhooks take reviews from any
// caller), so what a server holds for its callers must not grow with
// their number or slowness.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Deadlines and sizes of every server.
const (
	// ReadHeaderTimeout bounds a request's headers; ReadTimeout the whole
	// request, body included.
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 20 * time.Second
	// WriteTimeout bounds a response, from the end of the request's
	// headers: above the longest a handler may run (the webhooks' 10 s).
	WriteTimeout = 30 * time.Second
	// IdleTimeout closes a kept-alive connection that carries no request.
	IdleTimeout = 60 * time.Second
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 64 << 10
	// MaxConns is how many connections a server holds at once, and
	// MaxConnsPerHost how many of them one remote address holds; a
	// connection beyond either is closed as it is accepted.
	MaxConns        = 128
	MaxConnsPerHost = 16
	// HTTP/2 (the webhooks'): streams per connection and the request body
	// bytes a connection buffers before a handler reads them (the default
	// is 1 MiB a connection).
	MaxConcurrentStreams          = 32
	MaxReceiveBufferPerConnection = 256 << 10
	MaxReceiveBufferPerStream     = 256 << 10
)

// New returns a server of handler with the deadlines and sizes above.
func New(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          MaxConcurrentStreams,
			MaxReceiveBufferPerConnection: MaxReceiveBufferPerConnection,
			MaxReceiveBufferPerStream:     MaxReceiveBufferPerStream,
		},
	}
}

// Listen listens on the TCP address and holds at most MaxConns
// connections, MaxConnsPerHost per remote address.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return LimitListener(l, MaxConns, MaxConnsPerHost), nil
}

// LimitListener returns l holding at most total connections at once, and
// perHost from one remote address: a connection beyond that is closed as
// it is accepted (a caller that holds its share waits for none of its own
// to close; others are not kept waiting behind it).
func LimitListener(l net.Listener, total, perHost int) net.Listener {
	return &limitListener{Listener: l, total: total, perHost: perHost, byHost: map[string]int{}}
}

type limitListener struct {
	net.Listener
	mu             sync.Mutex
	total, perHost int
	n              int
	byHost         map[string]int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := hostOf(c.RemoteAddr())
		if l.acquire(host) {
			return &limitedConn{Conn: c, release: func() { l.release(host) }}, nil
		}
		_ = c.Close()
	}
}

func (l *limitListener) acquire(host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n >= l.total || l.byHost[host] >= l.perHost {
		return false
	}
	l.n++
	l.byHost[host]++
	return true
}

func (l *limitListener) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	if l.byHost[host]--; l.byHost[host] <= 0 {
		delete(l.byHost, host)
	}
}

func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// limitedConn gives its slot back when it is closed, once.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Serve serves srv on l until ctx ends, then shuts it down, waiting at
// most grace for the requests in progress; it returns the server's
// failure, or the shutdown's.
func Serve(ctx context.Context, srv *http.Server, l net.Listener, grace time.Duration) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve on %s: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if serveErr := <-served; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve on %s: %w", l.Addr(), serveErr)
	}
	if err != nil {
		return fmt.Errorf("shut down the server on %s: %w", l.Addr(), err)
	}
	return nil
}
