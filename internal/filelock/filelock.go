// Package filelock takes flock(2) locks on open files, for the four locks
// of a node: the checkpoint's, the hook state directory's, the slice
// publisher's and the NRI registration's. A lock belongs to the open file:
// locks taken through different opens of one path exclude each other, also
// within one process, and closing the file releases it. An interrupted
// flock(2) (EINTR) is tried again at once. The OCI hook links this
// package: it uses the standard library and golang.org/x/sys/unix only.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Mode is a lock's kind.
type Mode int

const (
	// Exclusive excludes every other lock.
	Exclusive Mode = unix.LOCK_EX
	// Shared excludes Exclusive locks only.
	Shared Mode = unix.LOCK_SH
)

func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ErrHeld is Try's error when another open file holds a lock that
// excludes the one asked for.
var ErrHeld = errors.New("held through another open file")

// Wait takes f's lock, waiting as long as another open file holds one that
// excludes it (flock(2) without LOCK_NB): for locks whose holders only do
// a little local I/O.
func Wait(f *os.File, mode Mode) error {
	return flock(f, int(mode))
}

// Try takes f's lock if no other open file holds one that excludes it;
// else it returns an error wrapping ErrHeld.
func Try(f *os.File, mode Mode) error {
	err := flock(f, int(mode)|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("%w: %w", ErrHeld, err)
	}
	return err
}

// Poll tries (Try) to take f's lock every interval until it gets it or ctx
// ends; it tries once before it looks at ctx. After each try that failed
// it calls failed with Try's error (wrapping ErrHeld when the lock is
// held): when failed returns false, Poll returns that error. When ctx
// ends first, Poll returns context.Cause(ctx).
func Poll(ctx context.Context, f *os.File, mode Mode, interval time.Duration, failed func(error) bool) error {
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		err := Try(f, mode)
		if err == nil {
			return nil
		}
		if !failed(err) {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		t.Reset(interval)
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// flock is flock(2), tried again when a signal interrupted it (each try
// but the last was cut short by a signal's delivery). Its error is the
// errno, for the callers to name the lock.
func flock(f *os.File, how int) error {
	for {
		if err := unix.Flock(int(f.Fd()), how); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
