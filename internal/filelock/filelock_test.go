package filelock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// open opens path as a new open file, closed at the test's end.
func open(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestTry: a lock taken through one open file excludes, through another
// open file of the same path in the same process, what flock(2) says it
// does, and closing the file releases it.
func TestTry(t *testing.T) {
	tests := []struct {
		held, want Mode
		excluded   bool
	}{
		{held: Exclusive, want: Exclusive, excluded: true},
		{held: Exclusive, want: Shared, excluded: true},
		{held: Shared, want: Exclusive, excluded: true},
		{held: Shared, want: Shared, excluded: false},
	}
	for _, tt := range tests {
		t.Run(tt.held.String()+" held, "+tt.want.String()+" wanted", func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lock")
			holder := open(t, path)
			if err := Try(holder, tt.held); err != nil {
				t.Fatalf("Try on a free lock: %v", err)
			}
			err := Try(open(t, path), tt.want)
			if tt.excluded && !errors.Is(err, ErrHeld) {
				t.Fatalf("Try while another open file holds it %s: %v, want ErrHeld", tt.held, err)
			}
			if !tt.excluded && err != nil {
				t.Fatalf("Try while another open file holds it %s: %v, want it taken", tt.held, err)
			}
			holder.Close()
			if err := Try(open(t, path), tt.want); err != nil {
				t.Fatalf("Try after the holder closed its file: %v", err)
			}
		})
	}
}

// TestWait: Wait returns only once the holder has let go, and a shared
// lock does not wait for another shared one.
func TestWait(t *testing.T) {
	tests := []struct {
		held, want Mode
		waits      bool
	}{
		{held: Exclusive, want: Exclusive, waits: true},
		{held: Exclusive, want: Shared, waits: true},
		{held: Shared, want: Exclusive, waits: true},
		{held: Shared, want: Shared, waits: false},
	}
	for _, tt := range tests {
		t.Run(tt.held.String()+" held, "+tt.want.String()+" wanted", func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lock")
			holder := open(t, path)
			if err := Wait(holder, tt.held); err != nil {
				t.Fatal(err)
			}
			var released atomic.Bool
			if tt.waits {
				go func() {
					time.Sleep(50 * time.Millisecond) // long enough for Wait to be waiting, most runs
					released.Store(true)
					holder.Close()
				}()
			}
			if err := Wait(open(t, path), tt.want); err != nil {
				t.Fatal(err)
			}
			if tt.waits && !released.Load() {
				t.Fatalf("Wait took the %s lock while another open file held it %s", tt.want, tt.held)
			}
		})
	}
}

// TestPoll: what Poll returns, and how often it asks failed, for a lock
// free, held all along, released while it polls, and a failed that stops.
func TestPoll(t *testing.T) {
	cause := errors.New("shutting down")
	tests := []struct {
		name       string
		held       bool
		releaseAt  int  // release the lock at this call of failed (0: never)
		stopAt     int  // failed returns false at this call (0: never)
		cancelAt   int  // cancel ctx with cause at this call (0: never)
		cancelled  bool // ctx ends before Poll starts
		wantErr    error
		wantFailed int
	}{
		{name: "free", wantFailed: 0},
		{name: "free, ctx already ended: still taken", cancelled: true, wantFailed: 0},
		{name: "held, ctx already ended: one try", held: true, cancelled: true, wantErr: cause, wantFailed: 1},
		{name: "released while polling", held: true, releaseAt: 3, wantFailed: 3},
		{name: "held until ctx ends", held: true, cancelAt: 4, wantErr: cause, wantFailed: 4},
		{name: "failed stops", held: true, stopAt: 2, wantErr: ErrHeld, wantFailed: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lock")
			holder := open(t, path)
			if tt.held {
				if err := Try(holder, Exclusive); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			if tt.cancelled {
				cancel(cause)
			}
			f := open(t, path)
			calls := 0
			err := Poll(ctx, f, Exclusive, time.Millisecond, func(err error) bool {
				calls++
				if !errors.Is(err, ErrHeld) {
					t.Errorf("failed(%v), want ErrHeld", err)
				}
				if calls == tt.releaseAt {
					holder.Close()
				}
				if calls == tt.cancelAt {
					cancel(cause)
				}
				return calls != tt.stopAt
			})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("Poll = %v, want %v", err, tt.wantErr)
			}
			if calls != tt.wantFailed {
				t.Errorf("failed called %d times, want %d", calls, tt.wantFailed)
			}
			// f holds the lock exactly when Poll says so.
			if err == nil {
				if err := Try(open(t, path), Exclusive); !errors.Is(err, ErrHeld) {
					t.Errorf("Poll took the lock, but another open file can take it too: %v", err)
				}
			} else {
				holder.Close()
				if err := Try(open(t, path), Exclusive); err != nil {
					t.Errorf("Poll gave up, but its file holds the lock: %v", err)
				}
			}
		})
	}
}
