// Package cdi writes and removes the per-claim transient CDI specs through
// which the dra.swap driver reaches containers: an environment variable with
// the container's swap limit and OCI hooks that apply it to the container's
// cgroup. The hooks' arguments are internal/hookargs.FormatArgs of the device's
// swapsettings.Settings and of values validated here, never text taken from
// a claim.
package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/atomicfile"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookargs"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

const (
	// Vendor and Class form the CDI kind "dra.swap/swap" of every device
	// the driver writes.
	Vendor = v1alpha1.DriverName
	Class  = "swap"

	// HookTimeoutSeconds bounds each hook run; a hook that hangs fails
	// the container start instead of blocking it forever. The hook gives
	// up at half of it, leaving its outcome (see internal/hook.Deadline).
	HookTimeoutSeconds = hookargs.TimeoutSeconds
)

// ClaimEdits is what one prepared claim does to the containers it reaches:
// one CDI device per allocation result, so that a container referencing
// one request of the claim gets that request's swap only.
type ClaimEdits struct {
	// ClaimUID names the spec and, with each result's index, its devices.
	ClaimUID string
	// PodUID, if set, is the only pod the claim's swap is granted to: the
	// hook refuses containers of any other pod (the scheduler charged the
	// claim once).
	PodUID string
	// PodLimitBytes, if set, is the swap budget of that pod (the sum
	// of its claims), for pods whose containers share a claim.
	PodLimitBytes *int64
	// Devices are the claim's results of this driver.
	Devices []DeviceEdits
}

// DeviceEdits is what one allocation result does to each container it
// reaches.
type DeviceEdits struct {
	// ResultIndex is the result's index in the claim's allocation; it
	// names the CDI device and the hook's record of the share.
	ResultIndex int
	// AdminAccess: the result was allocated with admin access, which the
	// scheduler does not charge: the device grants no swap and only sets
	// EnvAdminAccess.
	AdminAccess bool
	// Settings are what the result grants each container it reaches (its
	// consumed capacity as LimitBytes), applied by the hook. Several
	// shares on one container add up in the hook.
	swapsettings.Settings
	// EnvLimitBytes is the value of DRA_SWAP_LIMIT_BYTES: the total swap
	// limit of the containers the result reaches.
	EnvLimitBytes int64
}

// Writer writes transient CDI specs for claims into one directory.
type Writer struct {
	cache        *cdiapi.Cache
	specDir      string
	hookPath     string
	hookStateDir string
}

// NewWriter returns a Writer for specDir (the directory the container
// runtime reads CDI specs from, for example /var/run/cdi). hookPath is the
// absolute host path of the dra-swap-hook binary and hookStateDir the
// directory where the hook records per-container state.
func NewWriter(specDir, hookPath, hookStateDir string) (*Writer, error) {
	for name, p := range map[string]string{"CDI spec directory": specDir, "hook path": hookPath, "hook state directory": hookStateDir} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return nil, fmt.Errorf("%s %q must be a clean absolute path", name, p)
		}
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(specDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("create CDI cache for %s: %w", specDir, err)
	}
	return &Writer{cache: cache, specDir: specDir, hookPath: hookPath, hookStateDir: hookStateDir}, nil
}

// SpecName is the transient spec name (without extension) of a claim.
func SpecName(claimUID string) string {
	return cdiapi.GenerateTransientSpecName(Vendor, Class, claimUID)
}

// DeviceName is the CDI device name of one allocation result of a claim:
// <claim UID>-<result index>.
func DeviceName(claimUID string, resultIndex int) string {
	return fmt.Sprintf("%s-%d", claimUID, resultIndex)
}

// DeviceID is the fully qualified CDI device ID of one allocation result
// of a claim, as returned to the kubelet.
func DeviceID(claimUID string, resultIndex int) string {
	return parser.QualifiedName(Vendor, Class, DeviceName(claimUID, resultIndex))
}

// ParseDeviceID reads a device ID of this driver back into the claim's
// UID and the result's index.
func ParseDeviceID(id string) (claimUID string, resultIndex int, ok bool) {
	vendor, class, name, err := parser.ParseQualifiedName(id)
	if err != nil || vendor != Vendor || class != Class {
		return "", 0, false
	}
	i := strings.LastIndex(name, "-")
	if i < 0 {
		return "", 0, false
	}
	uid, index := name[:i], name[i+1:]
	n, err := strconv.Atoi(index)
	if !limits.IsUID(uid) || err != nil || n < 0 || n > limits.MaxResultIndex || strconv.Itoa(n) != index {
		return "", 0, false
	}
	return uid, n, true
}

// Spec builds the CDI spec of one claim. It is a pure function: the same
// edits always give the same spec.
func (w *Writer) Spec(edits ClaimEdits) (*cdispec.Spec, error) {
	if err := edits.validate(); err != nil {
		return nil, err
	}
	timeout := HookTimeoutSeconds
	spec := &cdispec.Spec{Kind: Vendor + "/" + Class}
	for _, d := range edits.Devices {
		device := cdispec.Device{Name: DeviceName(edits.ClaimUID, d.ResultIndex)}
		if d.AdminAccess {
			device.ContainerEdits.Env = []string{v1alpha1.EnvAdminAccess + "=true"}
		} else {
			device.ContainerEdits = cdispec.ContainerEdits{
				Env: []string{v1alpha1.EnvSwapLimit + "=" + strconv.FormatInt(d.EnvLimitBytes, 10)},
				Hooks: []*cdispec.Hook{
					{HookName: cdiapi.CreateRuntimeHook, Path: w.hookPath, Args: w.applyArgs(edits, d), Timeout: &timeout},
					{HookName: cdiapi.PoststopHook, Path: w.hookPath, Args: w.cleanupArgs(edits), Timeout: &timeout},
				},
			}
		}
		spec.Devices = append(spec.Devices, device)
	}
	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("minimum CDI version for claim %s: %w", edits.ClaimUID, err)
	}
	spec.Version = version
	return spec, nil
}

// applyArgs is the createRuntime hook's argv: the program name, then the
// hook's request for the device's share.
func (w *Writer) applyArgs(e ClaimEdits, d DeviceEdits) []string {
	req := hookargs.Request{ClaimUID: e.ClaimUID, ResultIndex: d.ResultIndex, PodUID: e.PodUID, Share: e.share(d)}
	return append([]string{filepath.Base(w.hookPath)}, hookargs.FormatArgs(hookargs.SpecConfig(w.hookStateDir), req)...)
}

// cleanupArgs is the poststop hook's argv.
func (w *Writer) cleanupArgs(e ClaimEdits) []string {
	req := hookargs.Request{Cleanup: true, ClaimUID: e.ClaimUID, ResultIndex: -1}
	return append([]string{filepath.Base(w.hookPath)}, hookargs.FormatArgs(hookargs.SpecConfig(w.hookStateDir), req)...)
}

func (e ClaimEdits) validate() error {
	if !limits.IsUID(e.ClaimUID) {
		return fmt.Errorf("claim UID %q is not a Kubernetes UID", e.ClaimUID)
	}
	if e.PodUID != "" && !limits.IsUID(e.PodUID) {
		return fmt.Errorf("claim %s: pod UID %q is not a Kubernetes UID", e.ClaimUID, e.PodUID)
	}
	if len(e.Devices) == 0 {
		return fmt.Errorf("claim %s: no devices", e.ClaimUID)
	}
	seen := map[int]bool{}
	for _, d := range e.Devices {
		if d.ResultIndex < 0 || d.ResultIndex > limits.MaxResultIndex || seen[d.ResultIndex] {
			return fmt.Errorf("claim %s: result index %d is negative, too large or repeated", e.ClaimUID, d.ResultIndex)
		}
		seen[d.ResultIndex] = true
		if err := d.validate(e.share(d)); err != nil {
			return fmt.Errorf("claim %s, result %d: %w", e.ClaimUID, d.ResultIndex, err)
		}
	}
	return nil
}

// share is what the device's createRuntime hook records for the container.
func (e ClaimEdits) share(d DeviceEdits) hookstate.Share {
	return hookstate.Share{Settings: d.Settings, PodLimitBytes: e.PodLimitBytes}
}

// validate checks the device's environment value and the share its hook
// records, as the hook and the record check it.
func (d DeviceEdits) validate(share hookstate.Share) error {
	if d.EnvLimitBytes < 0 {
		return fmt.Errorf("negative %s %d", v1alpha1.EnvSwapLimit, d.EnvLimitBytes)
	}
	return share.Validate()
}

// Write atomically writes (or replaces) the claim's spec; the CDI device
// ID of each of edits.Devices is DeviceID(edits.ClaimUID, its index).
func (w *Writer) Write(edits ClaimEdits) error {
	spec, err := w.Spec(edits)
	if err != nil {
		return err
	}
	if err := w.cache.WriteSpec(spec, SpecName(edits.ClaimUID)+".json"); err != nil {
		return fmt.Errorf("write CDI spec of claim %s: %w", edits.ClaimUID, err)
	}
	return nil
}

// maxSpecBytes bounds the spec Read reads: 32 results (the API's largest
// allocation) of under 1 KiB each need some 30 KiB.
const maxSpecBytes = 1 << 20

// Read reads the claim's spec back into the edits it was written from, as
// far as the spec holds them: each device's result index, admin access, the settings its createRuntime hook applies, its
// DRA_SWAP_LIMIT_BYTES (0 for an admin-access device), and the claim's pod
// and pod budget from the hooks' arguments. Read of what Write wrote gives
// the edits back. It is what the plugin knows of a claim whose checkpoint
// entry was lost. A spec that does not exist is an error wrapping
// fs.ErrNotExist; one that is not this driver's, or whose hooks today's
// hook would refuse, an error naming what is wrong.
func (w *Writer) Read(claimUID string) (ClaimEdits, error) {
	if !limits.IsUID(claimUID) {
		return ClaimEdits{}, fmt.Errorf("claim UID %q is not a Kubernetes UID", claimUID)
	}
	path := filepath.Join(w.specDir, SpecName(claimUID)+".json")
	data, err := atomicfile.ReadFile(path, maxSpecBytes)
	if err != nil {
		return ClaimEdits{}, fmt.Errorf("read CDI spec of claim %s: %w", claimUID, err)
	}
	edits, err := parseSpec(claimUID, data)
	if err != nil {
		return ClaimEdits{}, fmt.Errorf("CDI spec %s: %w", path, err)
	}
	return edits, nil
}

// parseSpec reads a claim's spec (see Read).
func parseSpec(claimUID string, data []byte) (ClaimEdits, error) {
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return ClaimEdits{}, err
	}
	if spec.Kind != Vendor+"/"+Class {
		return ClaimEdits{}, fmt.Errorf("kind %q, want %s/%s", spec.Kind, Vendor, Class)
	}
	if len(spec.Devices) == 0 || len(spec.Devices) > limits.MaxResultIndex+1 {
		return ClaimEdits{}, fmt.Errorf("%d devices, want 1 to %d", len(spec.Devices), limits.MaxResultIndex+1)
	}
	edits := ClaimEdits{ClaimUID: claimUID}
	seen := map[int]bool{}
	granting := false // a device with a hook was read
	for _, d := range spec.Devices {
		uid, index, ok := ParseDeviceID(parser.QualifiedName(Vendor, Class, d.Name))
		if !ok || uid != claimUID || seen[index] {
			return ClaimEdits{}, fmt.Errorf("device %q is not one of claim %s's, or repeated", d.Name, claimUID)
		}
		seen[index] = true
		de, pod, podLimit, err := parseDevice(claimUID, index, d.ContainerEdits)
		if err != nil {
			return ClaimEdits{}, fmt.Errorf("device %s: %w", d.Name, err)
		}
		switch {
		case de.AdminAccess:
		case !granting:
			granting, edits.PodUID, edits.PodLimitBytes = true, pod, podLimit
		case pod != edits.PodUID || !equalPtr(podLimit, edits.PodLimitBytes):
			return ClaimEdits{}, fmt.Errorf("device %s names another pod or pod budget than the claim's other devices", d.Name)
		}
		edits.Devices = append(edits.Devices, de)
	}
	return edits, nil
}

// parseDevice reads one device's edits: its environment and the request
// of its createRuntime hook (none with admin access).
func parseDevice(claimUID string, index int, ce cdispec.ContainerEdits) (d DeviceEdits, podUID string, podLimit *int64, err error) {
	d.ResultIndex = index
	if len(ce.Env) != 1 {
		return d, "", nil, fmt.Errorf("%d environment variables, want 1", len(ce.Env))
	}
	name, value, _ := strings.Cut(ce.Env[0], "=")
	switch name {
	case v1alpha1.EnvAdminAccess:
		if value != "true" || len(ce.Hooks) != 0 {
			return d, "", nil, fmt.Errorf("admin access %q with %d hooks, want true and none", value, len(ce.Hooks))
		}
		d.AdminAccess = true
		return d, "", nil, nil
	case v1alpha1.EnvSwapLimit:
		if d.EnvLimitBytes, err = strconv.ParseInt(value, 10, 64); err != nil || d.EnvLimitBytes < 0 {
			return d, "", nil, fmt.Errorf("%s %q is not a byte count", name, value)
		}
	default:
		return d, "", nil, fmt.Errorf("environment variable %q is not this driver's", name)
	}
	var apply []string
	for _, h := range ce.Hooks {
		if h != nil && h.HookName == cdiapi.CreateRuntimeHook {
			if apply != nil {
				return d, "", nil, errors.New("more than one createRuntime hook")
			}
			apply = h.Args
		}
	}
	if len(apply) == 0 {
		return d, "", nil, errors.New("no createRuntime hook")
	}
	_, req, err := hookargs.ParseArgs(apply[1:])
	if err != nil {
		return d, "", nil, fmt.Errorf("createRuntime hook: %w", err)
	}
	if req.Cleanup || req.ClaimUID != claimUID || req.ResultIndex != index {
		return d, "", nil, fmt.Errorf("createRuntime hook applies claim %s result %d, not this device's", req.ClaimUID, req.ResultIndex)
	}
	d.Settings = req.Share.Settings
	return d, req.PodUID, req.Share.PodLimitBytes, nil
}

func equalPtr(a, b *int64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

// Has reports whether the claim has a spec.
func (w *Writer) Has(claimUID string) (bool, error) {
	if !limits.IsUID(claimUID) {
		return false, fmt.Errorf("claim UID %q is not a Kubernetes UID", claimUID)
	}
	_, err := os.Stat(filepath.Join(w.specDir, SpecName(claimUID)+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
	}
	return true, nil
}

// Remove deletes the claim's spec; a spec that does not exist is not an
// error.
func (w *Writer) Remove(claimUID string) error {
	if !limits.IsUID(claimUID) {
		return fmt.Errorf("claim UID %q is not a Kubernetes UID", claimUID)
	}
	if err := w.cache.RemoveSpec(SpecName(claimUID) + ".json"); err != nil {
		return fmt.Errorf("remove CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}

// Claims lists the UIDs of the claims that have a spec in the directory
// (this driver's specs only; other files are left out).
func (w *Writer) Claims() ([]string, error) {
	entries, err := os.ReadDir(w.specDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list CDI specs in %s: %w", w.specDir, err)
	}
	prefix := strings.TrimSuffix(SpecName("x"), "x")
	var uids []string
	for _, e := range entries {
		uid, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		uid, ok = strings.CutSuffix(uid, ".json")
		if ok && limits.IsUID(uid) {
			uids = append(uids, uid)
		}
	}
	return uids, nil
}
