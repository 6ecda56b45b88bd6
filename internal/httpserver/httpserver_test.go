package httpserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestNew: every deadline and size is set (a zero one is no deadline).
func TestNew(t *testing.T) {
	srv := New(http.NotFoundHandler())
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout,
	} {
		if d <= 0 {
			t.Errorf("%s is %v: no deadline", name, d)
		}
	}
	if srv.MaxHeaderBytes != MaxHeaderBytes || srv.HTTP2 == nil || srv.HTTP2.MaxConcurrentStreams != MaxConcurrentStreams ||
		srv.HTTP2.MaxReceiveBufferPerConnection != MaxReceiveBufferPerConnection || srv.HTTP2.MaxReceiveBufferPerStream != MaxReceiveBufferPerStream {
		t.Errorf("sizes: headers %d, HTTP/2 %+v", srv.MaxHeaderBytes, srv.HTTP2)
	}
}

// closed reports whether the server closed c within d (it reads nothing
// but the end).
func closed(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

// TestLimitListener: a connection beyond the total or a remote address's
// share is closed as it is accepted; a closed one gives its slot back.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := LimitListener(inner, 3, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a1, a2 := dial("127.0.0.1"), dial("127.0.0.1")
	for range 2 {
		<-accepted
	}
	if a3 := dial("127.0.0.1"); !closed(a3, 2*time.Second) {
		t.Error("a third connection from one address was kept")
	}
	dial("127.0.0.2")
	served := <-accepted
	if b2 := dial("127.0.0.3"); !closed(b2, 2*time.Second) {
		t.Error("a fourth connection in all was kept")
	}
	if closed(a1, 100*time.Millisecond) || closed(a2, 100*time.Millisecond) {
		t.Error("a connection within the limits was closed")
	}
	served.Close()
	c := dial("127.0.0.3")
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Error("a closed connection's slot was not given back")
	}
	_ = c
}

// TestServeDeadlines: a connection that sends no request is closed once
// ReadHeaderTimeout passes (it does not wait forever), and Serve returns
// when its context ends.
func TestServeDeadlines(t *testing.T) {
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, New(http.NotFoundHandler()), l, time.Second) }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n")); err != nil { // and never the end
		t.Fatal(err)
	}
	start := time.Now()
	if !closed(c, ReadHeaderTimeout+20*time.Second) {
		t.Errorf("a connection that never finished its request's headers was kept %v", time.Since(start).Round(time.Second))
	}
	t.Logf("closed after %v", time.Since(start).Round(100*time.Millisecond))
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Serve did not return after its context ended")
	}
}
