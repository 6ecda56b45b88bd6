package webhook

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// countingBody counts the bytes read of a request body.
type countingBody struct {
	io.Reader
	read int
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.Reader.Read(p)
	c.read += n
	return n, err
}

func (c *countingBody) Close() error { return nil }

// TestBounded: a body over MaxBodyBytes is refused without being read when
// its length is declared, after MaxBodyBytes bytes when it is not; the
// handler runs with the caller's deadline, capped.
func TestBounded(t *testing.T) {
	tests := []struct {
		name           string
		size           int64
		declared       bool
		query          string
		wantStatus     int
		wantReadAtMost int
		wantDeadline   time.Duration
	}{
		{name: "7 MB, declared", size: 7_000_000, declared: true, wantStatus: http.StatusRequestEntityTooLarge, wantReadAtMost: 0},
		{name: "7 MB, chunked", size: 7_000_000, wantStatus: http.StatusOK, wantReadAtMost: MaxBodyBytes + 1},
		{name: "the limit", size: MaxBodyBytes, declared: true, wantStatus: http.StatusOK, wantReadAtMost: MaxBodyBytes, query: "?timeout=3s", wantDeadline: 3 * time.Second},
		{name: "a caller's long timeout is capped", size: 10, declared: true, wantStatus: http.StatusOK, wantReadAtMost: 10, query: "?timeout=1h", wantDeadline: MaxHandlerTimeout},
		{name: "no timeout", size: 10, declared: true, wantStatus: http.StatusOK, wantReadAtMost: 10, wantDeadline: DefaultHandlerTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var deadline time.Duration
			var readErr error
			h := Bounded(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if d, ok := r.Context().Deadline(); ok {
					deadline = time.Until(d)
				}
				_, readErr = io.ReadAll(r.Body)
				w.WriteHeader(http.StatusOK)
			}))
			body := &countingBody{Reader: strings.NewReader(strings.Repeat("x", int(tc.size)))}
			req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/x"+tc.query, body)
			req.ContentLength = -1
			if tc.declared {
				req.ContentLength = tc.size
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus || body.read > tc.wantReadAtMost {
				t.Fatalf("status %d after reading %d bytes, want %d after at most %d", rec.Code, body.read, tc.wantStatus, tc.wantReadAtMost)
			}
			if tc.size > MaxBodyBytes && !tc.declared && readErr == nil {
				t.Error("the handler read a body over the limit without an error")
			}
			if tc.wantStatus == http.StatusRequestEntityTooLarge && !strings.Contains(rec.Body.String(), "larger than the webhook's limit") {
				t.Errorf("response %s", rec.Body)
			}
			if tc.wantDeadline > 0 && (deadline > tc.wantDeadline || deadline < tc.wantDeadline-time.Second) {
				t.Errorf("deadline in %v, want %v", deadline, tc.wantDeadline)
			}
		})
	}
}
