// Package hookargs is the OCI hook's command line: the kubelet plugin
// writes it into the hooks of its CDI specs (FormatArgs), the runtime passes
// it to dra-swap-hook, which reads it (ParseArgs), and the plugin's NRI
// plugin reads it back from the specs. It is a contract between releases
// (see ParseArgs) and between the two programs, so it lives apart from
// both. Every argument is validated before it reaches a path.
package hookargs

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

const (
	// TimeoutSeconds is each hook's timeout in the CDI specs; the runtime
	// kills a hook that outlives it (internal/hook keeps its own, shorter,
	// deadline).
	TimeoutSeconds = 10

	// DefaultStateDir, DefaultProcRoot and DefaultCgroupRoot are the
	// defaults of --state-dir, --proc-root and --cgroup-root.
	DefaultStateDir   = "/run/dra-swap/hook"
	DefaultProcRoot   = "/proc"
	DefaultCgroupRoot = "/sys/fs/cgroup"
)

// Config says where the hook finds the host's files.
type Config struct {
	ProcRoot   string
	CgroupRoot string
	StateDir   string
}

// SpecConfig is the Config of the hooks of a CDI spec: the state
// directory, and the host's procfs and cgroup mounts where they always are.
func SpecConfig(stateDir string) Config {
	return Config{ProcRoot: DefaultProcRoot, CgroupRoot: DefaultCgroupRoot, StateDir: stateDir}
}

// Request is one hook invocation.
type Request struct {
	Cleanup  bool
	ClaimUID string
	// ResultIndex is the claim's allocation result whose share this is;
	// -1 for a Cleanup, which removes the whole claim's.
	ResultIndex int
	// PodUID, if set, is the one pod the claim's swap is granted to: a
	// container of any other pod is refused.
	PodUID string
	// Share is what the request's result grants the container (none for
	// Cleanup).
	Share hookstate.Share
}

// ShareKey names the request's share in the container's records.
func (r Request) ShareKey() string { return hookstate.ShareKey(r.ClaimUID, r.ResultIndex) }

// ParseArgs parses the hook's arguments (without the program name), as
// FormatArgs writes them or as any released CDI spec has them.
//
// The arguments are a contract between releases. A CDI spec outlives the
// plugin that wrote it: after an upgrade, the specs of the claims prepared
// before it are run by the new hook, which the new plugin installs at the
// same host path (--hook-path never changes between releases). So the
// contract only ever grows:
//
//   - Every argument form that a released spec contains is accepted, with
//     the same meaning, by every later hook.
//     internal/kubeletplugin/cdi/testdata holds a spec of each release, and
//     internal/kubeletplugin/cdi's tests feed their arguments to this
//     function.
//   - New flags may be added. A flag is never removed or renamed, and
//     never changes its meaning, value format or default.
//   - An unknown flag is an error, never skipped: a spec newer than the
//     hook fails the container loudly instead of quietly dropping a
//     setting. Upgrades do not run into this, because the plugin installs
//     its hook at start-up, before it writes any spec; a downgrade leaves
//     the newer specs of prepared claims failing until they are
//     unprepared.
//
// The forms of release 0.2.0, the first release (none was published
// before it), as argv after the program name:
//
//	createRuntime: --swap-limit=BYTES --claim-uid=UID --state-dir=DIR [--swap-high=BYTES] [--zswap=on|off] [--swappiness=0..100]
//	               --result-index=N [--pod-uid=UID] [--pod-swap-limit=BYTES] [--zswap-writeback=off] [--offload-max-stall=N]
//	poststop:      --cleanup --claim-uid=UID --state-dir=DIR
//
//	--result-index=N            the result's index in the claim's allocation (its share is recorded as UID.N)
//	--pod-uid=UID               the pod the claim is granted to; containers of other pods are refused
//	--pod-swap-limit=BYTES      the pod's swap budget, when its containers share a claim
//	--zswap-writeback=off       cgroup v2 memory.zswap.writeback = 0 (SwapConfig zswap CompressedOnly)
//	--offload-max-stall=N       the claim's offload budget in hundredths of a percent (1..10000), recorded for the plugin's offload loop
//
// --proc-root and --cgroup-root are for tests; specs do not set them.
//
// `dra-swap-hook --version` (the only argument) prints the hook's version
// for people. No spec writes it: cmd/dra-swap-hook answers it before
// ParseArgs, which refuses it.
func ParseArgs(args []string) (Config, Request, error) {
	cfg := Config{}
	var req Request
	var limit, high, swappiness, zswap, resultIndex, podLimit, writeback, offload string
	fs := flag.NewFlagSet("dra-swap-hook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&limit, "swap-limit", "", "swap limit in bytes")
	fs.StringVar(&req.ClaimUID, "claim-uid", "", "UID of the claim")
	fs.StringVar(&high, "swap-high", "", "cgroup v2 memory.swap.high in bytes")
	fs.StringVar(&zswap, "zswap", "", "on or off")
	fs.StringVar(&swappiness, "swappiness", "", "cgroup v1 memory.swappiness")
	fs.StringVar(&resultIndex, "result-index", "", "index of the claim's allocation result")
	fs.StringVar(&req.PodUID, "pod-uid", "", "UID of the only pod the claim's swap is granted to")
	fs.StringVar(&podLimit, "pod-swap-limit", "", "swap budget of the container's pod in bytes")
	fs.StringVar(&writeback, "zswap-writeback", "", "off: cgroup v2 memory.zswap.writeback = 0")
	fs.StringVar(&offload, "offload-max-stall", "", "the claim's offload budget in hundredths of a percent of wall time")
	fs.BoolVar(&req.Cleanup, "cleanup", false, "remove the container's state (poststop)")
	fs.StringVar(&cfg.StateDir, "state-dir", DefaultStateDir, "directory of per-container state")
	fs.StringVar(&cfg.ProcRoot, "proc-root", DefaultProcRoot, "procfs mount")
	fs.StringVar(&cfg.CgroupRoot, "cgroup-root", DefaultCgroupRoot, "cgroup mount root")
	if err := fs.Parse(args); err != nil {
		// The flag package's wording for an unknown flag, stable since Go 1.
		if strings.HasPrefix(err.Error(), "flag provided but not defined") {
			return cfg, req, fmt.Errorf("arguments: %w (unknown to this hook: was the CDI spec written by a newer dra.swap release?)", err)
		}
		return cfg, req, fmt.Errorf("arguments: %w", err)
	}
	if fs.NArg() > 0 {
		return cfg, req, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !limits.IsUID(req.ClaimUID) {
		return cfg, req, fmt.Errorf("--claim-uid %q is not a Kubernetes UID", req.ClaimUID)
	}
	for name, p := range map[string]string{"--state-dir": cfg.StateDir, "--proc-root": cfg.ProcRoot, "--cgroup-root": cfg.CgroupRoot} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return cfg, req, fmt.Errorf("%s %q must be a clean absolute path", name, p)
		}
	}
	if req.Cleanup {
		if limit != "" || high != "" || zswap != "" || swappiness != "" || resultIndex != "" || req.PodUID != "" || podLimit != "" ||
			writeback != "" || offload != "" {
			return cfg, req, errors.New("--cleanup takes no limits")
		}
		req.ResultIndex = -1
		return cfg, req, nil
	}
	var err error
	v, err := parseNumber("--result-index", resultIndex, limits.MaxResultIndex)
	if err != nil {
		return cfg, req, err
	}
	req.ResultIndex = int(v)
	if req.PodUID != "" && !limits.IsUID(req.PodUID) {
		return cfg, req, fmt.Errorf("--pod-uid %q is not a Kubernetes UID", req.PodUID)
	}
	if podLimit != "" {
		v, err := parseNumber("--pod-swap-limit", podLimit, limits.MaxSwapBytes)
		if err != nil {
			return cfg, req, err
		}
		req.Share.PodLimitBytes = &v
	}
	s := &req.Share.Settings
	if s.LimitBytes, err = parseNumber("--swap-limit", limit, limits.MaxSwapBytes); err != nil {
		return cfg, req, err
	}
	if high != "" {
		v, err := parseNumber("--swap-high", high, s.LimitBytes)
		if err != nil {
			return cfg, req, err
		}
		s.HighBytes = &v
	}
	if s.Zswap, err = swapsettings.ParseZswap(zswap); err != nil {
		return cfg, req, fmt.Errorf("--zswap %q must be on or off", zswap)
	}
	if swappiness != "" {
		v, err := parseNumber("--swappiness", swappiness, swapsettings.MaxSwappiness)
		if err != nil {
			return cfg, req, err
		}
		u := uint64(v)
		s.Swappiness = &u
	}
	switch writeback {
	case "":
	case "off":
		s.ZswapWritebackOff = true
	default:
		return cfg, req, fmt.Errorf("--zswap-writeback %q must be off", writeback)
	}
	if offload != "" {
		v, err := parseNumber("--offload-max-stall", offload, swapsettings.MaxOffloadMaxStall)
		if err != nil {
			return cfg, req, err
		}
		if v < swapsettings.MinOffloadMaxStall {
			return cfg, req, fmt.Errorf("--offload-max-stall %q must be a whole number from %d to %d", offload, swapsettings.MinOffloadMaxStall, swapsettings.MaxOffloadMaxStall)
		}
		b := int32(v)
		s.OffloadMaxStall = &b
	}
	return cfg, req, nil
}

// FormatArgs writes a request as the hook's arguments (without the program
// name), in the order and forms that the CDI specs of release 0.2.0 have
// (see ParseArgs); --proc-root and --cgroup-root only when they are not
// the defaults. ParseArgs reads them back to the same cfg and req, for
// every cfg and req that ParseArgs can return (a Cleanup request has no
// share and no result index).
func FormatArgs(cfg Config, req Request) []string {
	var args []string
	if req.Cleanup {
		args = []string{"--cleanup", "--claim-uid=" + req.ClaimUID, "--state-dir=" + cfg.StateDir}
	} else {
		s := req.Share.Settings
		args = []string{"--swap-limit=" + strconv.FormatInt(s.LimitBytes, 10), "--claim-uid=" + req.ClaimUID, "--state-dir=" + cfg.StateDir}
		if s.HighBytes != nil {
			args = append(args, "--swap-high="+strconv.FormatInt(*s.HighBytes, 10))
		}
		if s.Zswap != swapsettings.ZswapUnchanged {
			args = append(args, "--zswap="+s.Zswap.String())
		}
		if s.Swappiness != nil {
			args = append(args, "--swappiness="+strconv.FormatUint(*s.Swappiness, 10))
		}
		args = append(args, "--result-index="+strconv.Itoa(req.ResultIndex))
		if req.PodUID != "" {
			args = append(args, "--pod-uid="+req.PodUID)
		}
		if req.Share.PodLimitBytes != nil {
			args = append(args, "--pod-swap-limit="+strconv.FormatInt(*req.Share.PodLimitBytes, 10))
		}
		if s.ZswapWritebackOff {
			args = append(args, "--zswap-writeback=off")
		}
		if s.OffloadMaxStall != nil {
			args = append(args, "--offload-max-stall="+strconv.FormatInt(int64(*s.OffloadMaxStall), 10))
		}
	}
	if cfg.ProcRoot != DefaultProcRoot {
		args = append(args, "--proc-root="+cfg.ProcRoot)
	}
	if cfg.CgroupRoot != DefaultCgroupRoot {
		args = append(args, "--cgroup-root="+cfg.CgroupRoot)
	}
	return args
}

func parseNumber(flag, s string, max int64) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("%s is required", flag)
	}
	v, err := strconv.ParseUint(s, 10, 63)
	if err != nil || int64(v) > max {
		return 0, fmt.Errorf("%s %q must be a whole number from 0 to %d", flag, s, max)
	}
	return int64(v), nil
}
