package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dra-driver-swap/dra-driver-swap/pkg/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/pkg/podevents"
)

// Run is the whole hook: parse args and stdin, then apply or clean up.
func Run(args []string, stdin io.Reader) error {
	cfg, req, err := ParseArgs(args)
	if err != nil {
		return err
	}
	state, err := ParseState(stdin)
	if err != nil {
		return err
	}
	if req.Cleanup {
		return Cleanup(cfg, state)
	}
	return Apply(cfg, req, state)
}

// Apply records the claim's share for the container and applies the sum of
// the container's shares to its cgroup. Re-running it for the same claim
// and container changes nothing.
//
// The outcome, applied or not, is left in a record for the kubelet plugin
// to turn into an event on the pod (package podevents).
func Apply(cfg Config, req Request, state *specs.State) error {
	total, version, err := apply(cfg, req, state)
	if r, ok := podevents.FromAnnotations(state.Annotations); ok {
		r.LimitBytes, r.CgroupVersion, r.Time = total.SwapLimit, version, time.Now()
		if err != nil {
			r.Error = err.Error()
		}
		if werr := podevents.Write(cfg.StateDir, state.ID, r); werr != nil {
			// The event is lost; the limit is not.
			fmt.Fprintf(os.Stderr, "dra-swap-hook: container %s: %v\n", ContainerName(state), werr)
		}
	}
	return err
}

func apply(cfg Config, req Request, state *specs.State) (cgroupswap.Settings, int, error) {
	var total cgroupswap.Settings
	name := ContainerName(state)
	if state.Pid <= 0 {
		return total, 0, fmt.Errorf("container %s: OCI state has no process id (pid %d)", name, state.Pid)
	}
	target, err := findCgroup(cfg, state, name)
	if err != nil {
		return total, 0, err
	}
	dir := filepath.Join(cfg.StateDir, state.ID)
	if err := record(dir, req.ClaimUID, req.Share); err != nil {
		return total, target.Version, fmt.Errorf("container %s: %w", name, err)
	}
	if total, err = sum(dir); err != nil {
		return total, target.Version, fmt.Errorf("container %s: %w", name, err)
	}
	return total, target.Version, cgroupswap.Apply(target, total)
}

// Cleanup removes the container's records (poststop).
func Cleanup(cfg Config, state *specs.State) error {
	if err := os.RemoveAll(filepath.Join(cfg.StateDir, state.ID)); err != nil {
		return fmt.Errorf("container %s: remove hook state: %w", ContainerName(state), err)
	}
	return nil
}

func findCgroup(cfg Config, state *specs.State, name string) (cgroupswap.Target, error) {
	target := cgroupswap.Target{Root: cfg.CgroupRoot, Container: name}
	procFile := filepath.Join(cfg.ProcRoot, strconv.Itoa(state.Pid), "cgroup")
	f, err := os.Open(procFile)
	if err == nil {
		defer f.Close()
		version, group, perr := ParseProcCgroup(f)
		if perr == nil {
			target.Version, target.Group = version, group
			return target, nil
		}
		err = fmt.Errorf("%s: %w", procFile, perr)
	}
	// Fall back to the bundle's config.json when it names a plain path
	// (the cgroupfs driver; systemd's "slice:prefix:name" is not a path).
	group, cerr := bundleCgroupsPath(state.Bundle)
	if cerr != nil {
		return target, fmt.Errorf("container %s: find its cgroup: %w; %w", name, err, cerr)
	}
	target.Group = group
	target.Version = 1
	if _, serr := os.Stat(filepath.Join(cfg.CgroupRoot, "cgroup.controllers")); serr == nil {
		target.Version = 2
	}
	return target, nil
}

func bundleCgroupsPath(bundle string) (string, error) {
	if !filepath.IsAbs(bundle) {
		return "", fmt.Errorf("bundle %q is not an absolute path", bundle)
	}
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return "", err
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return "", fmt.Errorf("decode %s/config.json: %w", bundle, err)
	}
	if spec.Linux == nil || spec.Linux.CgroupsPath == "" || strings.Contains(spec.Linux.CgroupsPath, ":") {
		return "", fmt.Errorf("%s/config.json names no plain cgroups path", bundle)
	}
	return checkGroup(spec.Linux.CgroupsPath)
}

// record writes the claim's share atomically into the container's dir.
func record(dir, claimUID string, share Share) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create hook state %s: %w", dir, err)
	}
	data, err := json.Marshal(share)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("record claim %s: %w", claimUID, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("record claim %s: %w", claimUID, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("record claim %s: %w", claimUID, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, claimUID)); err != nil {
		return fmt.Errorf("record claim %s: %w", claimUID, err)
	}
	return nil
}

// sum combines the container's recorded shares: limits add up; swap.high
// adds up over the claims that set it, counting the others at their limit;
// zswap is off if any claim turns it off; swappiness is the lowest asked.
func sum(dir string) (cgroupswap.Settings, error) {
	var total cgroupswap.Settings
	entries, err := os.ReadDir(dir)
	if err != nil {
		return total, fmt.Errorf("read hook state %s: %w", dir, err)
	}
	var high int64
	anyHigh := false
	for _, e := range entries {
		if !uidPattern.MatchString(e.Name()) {
			continue // temporary files
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return total, err
		}
		var s Share
		if err := json.Unmarshal(data, &s); err != nil {
			return total, fmt.Errorf("hook state %s/%s: %w", dir, e.Name(), err)
		}
		if s.SwapLimit < 0 || s.SwapLimit > maxSwapBytes || total.SwapLimit > maxSwapBytes-s.SwapLimit {
			return total, fmt.Errorf("hook state %s/%s: swap limit %d out of range", dir, e.Name(), s.SwapLimit)
		}
		total.SwapLimit += s.SwapLimit
		if s.SwapHigh != nil {
			anyHigh = true
			high += *s.SwapHigh
		} else {
			high += s.SwapLimit
		}
		if s.Zswap != nil && (total.Zswap == nil || !*s.Zswap) {
			v := *s.Zswap
			total.Zswap = &v
		}
		if s.Swappiness != nil && (total.Swappiness == nil || *s.Swappiness < *total.Swappiness) {
			v := *s.Swappiness
			total.Swappiness = &v
		}
	}
	if anyHigh {
		total.SwapHigh = &high
	}
	return total, nil
}
