// Package cgroupswap writes and reads a container's swap limit on cgroup v1
// and v2 through github.com/containerd/cgroups/v3. It is the actuation layer:
// it applies the numbers it is given and decides nothing.
package cgroupswap

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// unlimitedV1 is the smallest value cgroup v1 reports for "no limit"
// (the kernel shows 9223372036854771712, PAGE_COUNTER_MAX pages).
const unlimitedV1 = int64(1) << 62

// Target is one container's cgroup, or one pod's.
type Target struct {
	// Version is 1 or 2.
	Version int
	// Root is the cgroup mount root, normally /sys/fs/cgroup. On v1 the
	// memory hierarchy is Root/memory.
	Root string
	// Group is the container's cgroup path within the hierarchy,
	// starting with "/".
	Group string
	// Container names the container (or the pod) in error messages.
	Container string
	// Pod says the cgroup is a pod's: the budget its containers share.
	Pod bool
}

// what names the target in messages.
func (t Target) what() string {
	if t.Pod {
		return "pod " + t.Container
	}
	return "container " + t.Container
}

// Apply writes s into the target's cgroup.
func Apply(t Target, s swapsettings.Settings) error {
	if s.LimitBytes < 0 {
		return fmt.Errorf("%s: negative swap limit %d", t.what(), s.LimitBytes)
	}
	if !strings.HasPrefix(t.Group, "/") || strings.Contains(t.Group, "..") {
		return fmt.Errorf("%s: cgroup path %q is not an absolute path within the hierarchy", t.what(), t.Group)
	}
	if !s.Zswap.Valid() {
		return fmt.Errorf("%s: zswap %s is none of unchanged, on and off", t.what(), s.Zswap)
	}
	switch t.Version {
	case 1:
		return applyV1(t, s)
	case 2:
		return applyV2(t, s)
	}
	return fmt.Errorf("%s: unknown cgroup version %d", t.what(), t.Version)
}

func applyV1(t Target, s swapsettings.Settings) error {
	if s.HighBytes != nil || s.Zswap != swapsettings.ZswapUnchanged || s.ZswapWritebackOff {
		return fmt.Errorf("%s: memory.swap.high, memory.zswap.max and memory.zswap.writeback exist only on cgroup v2", t.what())
	}
	mem := cgroup1.NewMemory(t.Root)
	dir := mem.Path(t.Group)
	memswFile := filepath.Join(dir, "memory.memsw.limit_in_bytes")
	if _, err := os.Stat(memswFile); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %s does not exist: swap accounting is off (boot the kernel with swapaccount=1)", t.what(), memswFile)
		}
		return fmt.Errorf("%s: %w", t.what(), err)
	}
	limit, err := readInt(filepath.Join(dir, "memory.limit_in_bytes"))
	if err != nil {
		return fmt.Errorf("%s: %w", t.what(), err)
	}
	if limit >= unlimitedV1 {
		return fmt.Errorf("%s has no memory limit: on cgroup v1 swap can only be bounded together with memory; set resources.limits.memory%s", t.what(), podHint(t))
	}
	if s.LimitBytes > math.MaxInt64-limit {
		return fmt.Errorf("%s: memory limit %d plus swap limit %d overflows", t.what(), limit, s.LimitBytes)
	}
	memsw := limit + s.LimitBytes
	// memsw may only be raised above, or lowered to, the memory limit; the
	// memory limit is not touched, so memsw ≥ limit always holds.
	err = mem.Update(t.Group, &specs.LinuxResources{Memory: &specs.LinuxMemory{Swap: &memsw, Swappiness: s.Swappiness}})
	if err != nil {
		return fmt.Errorf("%s: set %s to %d (memory limit %d + swap %d): %w", t.what(), memswFile, memsw, limit, s.LimitBytes, err)
	}
	return nil
}

func podHint(t Target) string {
	if t.Pod {
		return " on every container of the pod (its containers share a claim, so the pod's cgroup bounds their swap together)"
	}
	return ""
}

func applyV2(t Target, s swapsettings.Settings) error {
	if s.Swappiness != nil {
		return fmt.Errorf("%s: cgroup v2 has no per-cgroup swappiness", t.what())
	}
	dir := filepath.Join(t.Root, t.Group)
	swapMax := filepath.Join(dir, "memory.swap.max")
	if _, err := os.Stat(swapMax); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: cgroup %s has no memory.swap.max: the kernel lacks swap accounting or the memory controller is off", t.what(), dir)
		}
		return fmt.Errorf("%s: %w", t.what(), err)
	}
	m, err := cgroup2.Load(t.Group, cgroup2.WithMountpoint(t.Root))
	if err != nil {
		return fmt.Errorf("%s: load cgroup %s: %w", t.what(), dir, err)
	}
	limit := s.LimitBytes
	if err := m.Update(&cgroup2.Resources{Memory: &cgroup2.Memory{Swap: &limit}}); err != nil {
		return fmt.Errorf("%s: set %s to %d: %w", t.what(), swapMax, limit, err)
	}
	// The library has no memory.swap.high or memory.zswap.max.
	if s.HighBytes != nil {
		if err := writeFile(filepath.Join(dir, "memory.swap.high"), strconv.FormatInt(*s.HighBytes, 10)); err != nil {
			return fmt.Errorf("%s: %w", t.what(), err)
		}
	}
	if s.Zswap != swapsettings.ZswapUnchanged {
		value := "max"
		if s.Zswap == swapsettings.ZswapOff {
			value = "0"
		}
		if err := writeFile(filepath.Join(dir, "memory.zswap.max"), value); err != nil {
			return fmt.Errorf("%s: %w (zswap control needs Linux 5.19 or later)", t.what(), err)
		}
	}
	if s.ZswapWritebackOff {
		if err := writeFile(filepath.Join(dir, "memory.zswap.writeback"), "0"); err != nil {
			return fmt.Errorf("%s: %w (memory.zswap.writeback needs Linux 6.8 or later)", t.what(), err)
		}
	}
	return nil
}

// ReadLimit returns the swap limit of a cgroup: v2 memory.swap.max ("max"
// is -1); v1 memory.memsw.limit_in_bytes − memory.limit_in_bytes.
func ReadLimit(version int, root, group string) (int64, error) {
	switch version {
	case 1:
		dir := filepath.Join(root, "memory", group)
		memsw, err := readInt(filepath.Join(dir, "memory.memsw.limit_in_bytes"))
		if err != nil {
			return 0, err
		}
		limit, err := readInt(filepath.Join(dir, "memory.limit_in_bytes"))
		if err != nil {
			return 0, err
		}
		return memsw - limit, nil
	case 2:
		return readInt(filepath.Join(root, group, "memory.swap.max"))
	}
	return 0, fmt.Errorf("unknown cgroup version %d", version)
}

// ReadUsage returns the swap a cgroup uses: v2 memory.swap.current; v1
// memory.memsw.usage_in_bytes − memory.usage_in_bytes.
func ReadUsage(version int, root, group string) (int64, error) {
	switch version {
	case 1:
		dir := filepath.Join(root, "memory", group)
		memsw, err := readInt(filepath.Join(dir, "memory.memsw.usage_in_bytes"))
		if err != nil {
			return 0, err
		}
		usage, err := readInt(filepath.Join(dir, "memory.usage_in_bytes"))
		if err != nil {
			return 0, err
		}
		return memsw - usage, nil
	case 2:
		return readInt(filepath.Join(root, group, "memory.swap.current"))
	}
	return 0, fmt.Errorf("unknown cgroup version %d", version)
}

// MemswUsageFits reports whether a cgroup v1 group's memory+swap usage is
// within its memory limit plus limitBytes, so that Apply of that swap
// limit needs no reclaim. The kernel refuses (EBUSY) to lower
// memory.memsw.limit_in_bytes below the usage when reclaim cannot make
// room, and reclaim cannot shrink memory+swap by swapping: a container
// whose memory limit was lowered while it had swapped out memory keeps
// the larger memory+swap until its usage falls. cgroup v2's
// memory.swap.max takes any value: an error there.
func MemswUsageFits(t Target, limitBytes int64) (bool, error) {
	if t.Version != 1 {
		return false, fmt.Errorf("%s: memory+swap usage is a cgroup v1 notion, not of v%d", t.what(), t.Version)
	}
	dir := cgroup1.NewMemory(t.Root).Path(t.Group)
	usage, err := readInt(filepath.Join(dir, "memory.memsw.usage_in_bytes"))
	if err != nil {
		return false, err
	}
	limit, err := readInt(filepath.Join(dir, "memory.limit_in_bytes"))
	if err != nil {
		return false, err
	}
	return limit < unlimitedV1 && limitBytes <= math.MaxInt64-limit && usage <= limit+limitBytes, nil
}

// readInt reads a cgroup file holding one integer or "max" (-1).
func readInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return -1, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", path, s)
	}
	return v, nil
}

func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(value); err != nil {
		f.Close()
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return f.Close()
}
