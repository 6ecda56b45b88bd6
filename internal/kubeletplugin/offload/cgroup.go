package offload

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The cgroup v2 files the loop reads and writes in a container's cgroup.
const (
	filePressure    = "memory.pressure"
	fileCurrent     = "memory.current"
	fileSwapCurrent = "memory.swap.current"
	fileSwapPeak    = "memory.swap.peak"
	fileStat        = "memory.stat"
	fileReclaim     = "memory.reclaim"
)

// maxFileBytes bounds a cgroup file read (memory.pressure is two lines);
// a read buffer is one byte more, to tell a longer file.
const maxFileBytes = 4096

// read reads this interval's figures of the cgroup at dir: memory
// pressure, memory and swap in use, anonymous pages refaulted where
// memory.stat has them, and memory.swap.peak where the kernel has it
// (Linux 6.5 and later; peak -1 otherwise).
func read(dir string, now time.Time, buf []byte) (r Reading, peak int64, err error) {
	r.At = now
	data, err := readFile(filepath.Join(dir, filePressure), buf)
	if err != nil {
		return r, -1, err
	}
	if r.StallTotal, err = someTotal(data); err != nil {
		return r, -1, fmt.Errorf("%s: %w", filepath.Join(dir, filePressure), err)
	}
	if r.Current, err = readInt(filepath.Join(dir, fileCurrent), buf); err != nil {
		return r, -1, err
	}
	if r.SwapCurrent, err = readInt(filepath.Join(dir, fileSwapCurrent), buf); err != nil {
		return r, -1, err
	}
	// workingset_refault_anon (Linux 5.9 and later): without it the
	// loop has no refault guard.
	r.RefaultedPages = -1
	if data, err := readFile(filepath.Join(dir, fileStat), buf); err == nil {
		if v, ok := statValue(data, "workingset_refault_anon"); ok {
			r.RefaultedPages = v
		}
	}
	peak, err = readInt(filepath.Join(dir, fileSwapPeak), buf)
	if errors.Is(err, fs.ErrNotExist) {
		return r, -1, nil
	}
	return r, peak, err
}

// statValue is the value of a "key value" line of memory.stat; false
// when the key is missing or its value is not a non-negative integer.
func statValue(data []byte, key string) (int64, bool) {
	for line := range bytes.Lines(data) {
		rest, ok := bytes.CutPrefix(line, []byte(key+" "))
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(rest)), 10, 64)
		return v, err == nil && v >= 0
	}
	return 0, false
}

// someTotal reads the "some" line's total (microseconds) of a PSI file:
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=12345
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=6789
//
// A file without a "some" line with a total, or with one that is not an
// unsigned integer, is an error.
func someTotal(data []byte) (uint64, error) {
	for line := range bytes.Lines(data) {
		rest, ok := bytes.CutPrefix(line, []byte("some "))
		if !ok {
			continue
		}
		for field := range bytes.FieldsSeq(rest) {
			if v, ok := bytes.CutPrefix(field, []byte("total=")); ok {
				total, err := strconv.ParseUint(string(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("some total %q is not a number", v)
				}
				return total, nil
			}
		}
		return 0, errors.New(`the "some" line has no total`)
	}
	return 0, errors.New(`no "some" line`)
}

// readFile reads a whole cgroup file, at most maxFileBytes, into buf (of
// maxFileBytes). Plain system calls: a cgroup file needs no poller, and
// the loop reads four files of each container every interval.
func readFile(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	if n == len(buf) {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, len(buf)-1)
	}
	return buf[:n], nil
}

// readInt reads a cgroup file holding one integer ("max" is an error: the
// files read here always hold a number).
func readInt(path string, buf []byte) (int64, error) {
	data, err := readFile(path, buf)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%s: %q is not a byte count", path, bytes.TrimSpace(data))
	}
	return v, nil
}

// reclaimer writes memory.reclaim, with the strongest preference for
// anonymous memory the kernel accepts, found by a probe the first time:
// "swappiness=max" (anonymous memory only, the newest kernels), else
// "swappiness=200" (the highest preference for it, where memory.reclaim
// takes a swappiness), else no argument (the kernel's own balance of
// anonymous and file pages, as memory.reclaim came in Linux 5.19). A
// kernel refuses an argument it does not know with EINVAL; a 0-byte write
// probes: the kernel parses the arguments and reclaims nothing.
type reclaimer struct {
	probed bool
	arg    string
	// write writes a cgroup file (writeFile; tests substitute it to
	// produce the kernel's EINVAL and EAGAIN).
	write func(path, value string) error
}

// reclaimArgs are the arguments probed, strongest first.
var reclaimArgs = []string{" swappiness=max", " swappiness=200", ""}

// Argument is the argument the probe settled on ("" before the probe,
// or when the kernel takes none).
func (rc *reclaimer) Argument() string { return rc.arg }

// reclaim asks the kernel to reclaim n bytes of the cgroup at dir. The
// kernel returns EAGAIN when it could not reclaim them all.
func (rc *reclaimer) reclaim(dir string, n int64) error {
	path := filepath.Join(dir, fileReclaim)
	if !rc.probed {
		if err := rc.probe(path); err != nil {
			return err
		}
	}
	return rc.writeFile(path, strconv.FormatInt(n, 10)+rc.arg)
}

func (rc *reclaimer) writeFile(path, value string) error {
	if rc.write != nil {
		return rc.write(path, value)
	}
	return writeFile(path, value)
}

func (rc *reclaimer) probe(path string) error {
	for _, arg := range reclaimArgs {
		err := rc.writeFile(path, "0"+arg)
		if errors.Is(err, syscall.EINVAL) && arg != "" {
			continue
		}
		if err != nil {
			return err
		}
		rc.probed, rc.arg = true, arg
		return nil
	}
	return nil
}

// writeFile writes value to a cgroup file in one write(2), as the
// kernel's cgroup files want it.
func writeFile(path, value string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		_, err = unix.Write(fd, []byte(value))
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}
