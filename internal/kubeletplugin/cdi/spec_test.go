package cdi

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/utils/ptr"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

const uid = "0f5d1a7e-3b0c-4c55-9d8e-1c2b3a4d5e6f"

func newTestWriter(t *testing.T) (*Writer, string) {
	t.Helper()
	dir := t.TempDir()
	w, err := NewWriter(dir, "/opt/dra-swap/bin/dra-swap-hook", "/run/dra-swap/hook")
	if err != nil {
		t.Fatal(err)
	}
	return w, dir
}

const podUID = "5e4d3c2b-1a09-4f8e-8d7c-6b5a49382716"

func TestSpecContent(t *testing.T) {
	w, _ := newTestWriter(t)
	base := []string{"dra-swap-hook", "--swap-limit=%d", "--claim-uid=" + uid, "--state-dir=/run/dra-swap/hook"}
	apply := func(limit int64, extra ...string) []string {
		args := slices.Clone(base)
		args[1] = strings.Replace(args[1], "%d", strconv.FormatInt(limit, 10), 1)
		return append(args, extra...)
	}
	type device struct {
		name  string
		env   []string
		apply []string // nil: no hooks
	}
	tests := []struct {
		name  string
		edits ClaimEdits
		want  []device
	}{
		{
			name:  "limit only",
			edits: ClaimEdits{ClaimUID: uid, Devices: []DeviceEdits{{ResultIndex: 0, Settings: swapsettings.Settings{LimitBytes: 2 << 30}, EnvLimitBytes: 2 << 30}}},
			want:  []device{{name: uid + "-0", env: []string{"DRA_SWAP_LIMIT_BYTES=2147483648"}, apply: apply(2<<30, "--result-index=0")}},
		},
		{
			name:  "env is the container total",
			edits: ClaimEdits{ClaimUID: uid, Devices: []DeviceEdits{{ResultIndex: 0, Settings: swapsettings.Settings{LimitBytes: 1 << 20}, EnvLimitBytes: 3 << 20}}},
			want:  []device{{name: uid + "-0", env: []string{"DRA_SWAP_LIMIT_BYTES=3145728"}, apply: apply(1<<20, "--result-index=0")}},
		},
		{
			name:  "all knobs",
			edits: ClaimEdits{ClaimUID: uid, Devices: []DeviceEdits{{ResultIndex: 0, Settings: swapsettings.Settings{LimitBytes: 100 << 20, HighBytes: ptr.To[int64](80 << 20), Zswap: swapsettings.ZswapOff, Swappiness: ptr.To[uint64](0)}, EnvLimitBytes: 100 << 20}}},
			want: []device{{name: uid + "-0", env: []string{"DRA_SWAP_LIMIT_BYTES=104857600"},
				apply: apply(100<<20, "--swap-high=83886080", "--zswap=off", "--swappiness=0", "--result-index=0")}},
		},
		{
			name: "one device per result, the pod and its budget on each",
			edits: ClaimEdits{ClaimUID: uid, PodUID: podUID, PodLimitBytes: ptr.To[int64](300 << 20), Devices: []DeviceEdits{
				{ResultIndex: 0, Settings: swapsettings.Settings{LimitBytes: 100 << 20}, EnvLimitBytes: 100 << 20},
				{ResultIndex: 2, Settings: swapsettings.Settings{LimitBytes: 200 << 20}, EnvLimitBytes: 300 << 20},
				{ResultIndex: 3, AdminAccess: true},
			}},
			want: []device{
				{name: uid + "-0", env: []string{"DRA_SWAP_LIMIT_BYTES=104857600"},
					apply: apply(100<<20, "--result-index=0", "--pod-uid="+podUID, "--pod-swap-limit=314572800")},
				{name: uid + "-2", env: []string{"DRA_SWAP_LIMIT_BYTES=314572800"},
					apply: apply(200<<20, "--result-index=2", "--pod-uid="+podUID, "--pod-swap-limit=314572800")},
				{name: uid + "-3", env: []string{"DRA_SWAP_ADMIN_ACCESS=true"}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := w.Spec(tc.edits)
			if err != nil {
				t.Fatal(err)
			}
			if spec.Kind != "dra.swap/swap" || spec.Version == "" {
				t.Errorf("kind %q version %q", spec.Kind, spec.Version)
			}
			if len(spec.Devices) != len(tc.want) {
				t.Fatalf("devices = %+v, want %d", spec.Devices, len(tc.want))
			}
			for i, want := range tc.want {
				d := spec.Devices[i]
				if d.Name != want.name {
					t.Errorf("device %d is named %q, want %q", i, d.Name, want.name)
				}
				edits := d.ContainerEdits
				if !reflect.DeepEqual(edits.Env, want.env) {
					t.Errorf("device %s: env = %v, want %v", d.Name, edits.Env, want.env)
				}
				if want.apply == nil {
					if len(edits.Hooks) != 0 {
						t.Errorf("device %s: hooks = %+v, want none", d.Name, edits.Hooks)
					}
					continue
				}
				if len(edits.Hooks) != 2 {
					t.Fatalf("device %s: hooks = %+v", d.Name, edits.Hooks)
				}
				apply, cleanup := edits.Hooks[0], edits.Hooks[1]
				if apply.HookName != "createRuntime" || apply.Path != "/opt/dra-swap/bin/dra-swap-hook" || *apply.Timeout != HookTimeoutSeconds {
					t.Errorf("device %s: apply hook = %+v", d.Name, apply)
				}
				if !reflect.DeepEqual(apply.Args, want.apply) {
					t.Errorf("device %s: apply args = %q, want %q", d.Name, apply.Args, want.apply)
				}
				wantCleanup := []string{"dra-swap-hook", "--cleanup", "--claim-uid=" + uid, "--state-dir=/run/dra-swap/hook"}
				if cleanup.HookName != "poststop" || !reflect.DeepEqual(cleanup.Args, wantCleanup) {
					t.Errorf("device %s: cleanup hook = %+v", d.Name, cleanup)
				}
			}
		})
	}
}

func TestSpecRejectsBadEdits(t *testing.T) {
	w, _ := newTestWriter(t)
	one := func(d DeviceEdits) []DeviceEdits { return []DeviceEdits{d} }
	for name, e := range map[string]ClaimEdits{
		"uid with path":     {ClaimUID: "../../etc/passwd", Devices: one(DeviceEdits{})},
		"uid with spaces":   {ClaimUID: uid + " --swap-limit=1", Devices: one(DeviceEdits{})},
		"uppercase uid":     {ClaimUID: strings.ToUpper(uid), Devices: one(DeviceEdits{})},
		"pod uid with args": {ClaimUID: uid, PodUID: podUID + " --x", Devices: one(DeviceEdits{})},
		"negative pod":      {ClaimUID: uid, PodLimitBytes: ptr.To[int64](-1), Devices: one(DeviceEdits{})},
		"pod too large":     {ClaimUID: uid, PodLimitBytes: ptr.To(limits.MaxSwapBytes + 1), Devices: one(DeviceEdits{})},
		"no devices":        {ClaimUID: uid},
		"repeated index":    {ClaimUID: uid, Devices: []DeviceEdits{{ResultIndex: 1}, {ResultIndex: 1}}},
		"negative index":    {ClaimUID: uid, Devices: one(DeviceEdits{ResultIndex: -1})},
		"negative limit":    {ClaimUID: uid, Devices: one(DeviceEdits{Settings: swapsettings.Settings{LimitBytes: -1}})},
		"high above limit":  {ClaimUID: uid, Devices: one(DeviceEdits{Settings: swapsettings.Settings{LimitBytes: 10, HighBytes: ptr.To[int64](11)}})},
		"bad zswap":         {ClaimUID: uid, Devices: one(DeviceEdits{Settings: swapsettings.Settings{Zswap: 3}})},
		"limit too large":   {ClaimUID: uid, Devices: one(DeviceEdits{Settings: swapsettings.Settings{LimitBytes: limits.MaxSwapBytes + 1}})},
		"negative env":      {ClaimUID: uid, Devices: one(DeviceEdits{EnvLimitBytes: -1})},
		"swappiness 101":    {ClaimUID: uid, Devices: one(DeviceEdits{Settings: swapsettings.Settings{Swappiness: ptr.To[uint64](101)}})},
	} {
		if _, err := w.Spec(e); err == nil {
			t.Errorf("%s: Spec accepted %+v", name, e)
		}
		if err := w.Write(e); err == nil {
			t.Errorf("%s: Write accepted %+v", name, e)
		}
	}
	if err := w.Remove("../x"); err == nil {
		t.Error("Remove accepted a bad UID")
	}
	if _, err := w.Has("../x"); err == nil {
		t.Error("Has accepted a bad UID")
	}
}

func TestParseDeviceID(t *testing.T) {
	for _, tc := range []struct {
		id    string
		uid   string
		index int
		ok    bool
	}{
		{id: DeviceID(uid, 0), uid: uid, index: 0, ok: true},
		{id: DeviceID(uid, 31), uid: uid, index: 31, ok: true},
		{id: "dra.swap/swap=" + uid}, // a claim UID alone names no result
		{id: "dra.swap/swap=" + uid + "-01"},
		{id: "dra.swap/swap=" + uid + "-x"},
		{id: "other.vendor/swap=" + uid + "-0"},
		{id: "dra.swap/swap=abc-0"},
		{id: "garbage"},
	} {
		got, index, ok := ParseDeviceID(tc.id)
		if ok != tc.ok || (ok && (got != tc.uid || index != tc.index)) {
			t.Errorf("ParseDeviceID(%q) = %q, %d, %v; want %q, %d, %v", tc.id, got, index, ok, tc.uid, tc.index, tc.ok)
		}
	}
}

func TestNewWriterRejectsRelativePaths(t *testing.T) {
	for _, args := range [][3]string{
		{"cdi", "/hook", "/state"},
		{"/cdi", "hook", "/state"},
		{"/cdi", "/hook", "/state/../x"},
	} {
		if _, err := NewWriter(args[0], args[1], args[2]); err == nil {
			t.Errorf("NewWriter%q succeeded", args)
		}
	}
}

// TestWriteInjectRemove checks the spec as a container runtime sees it: the
// CDI library reads it back and injects one result's device into an OCI
// spec, with that result's numbers only.
func TestWriteInjectRemove(t *testing.T) {
	w, dir := newTestWriter(t)
	edits := ClaimEdits{ClaimUID: uid, Devices: []DeviceEdits{
		{ResultIndex: 0, Settings: swapsettings.Settings{LimitBytes: 300 << 20}, EnvLimitBytes: 300 << 20},
		{ResultIndex: 1, Settings: swapsettings.Settings{LimitBytes: 100 << 20}, EnvLimitBytes: 100 << 20},
	}}
	if err := w.Write(edits); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "dra.swap-swap_"+uid+".json")
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("spec file: %v", err)
	}
	if has, err := w.Has(uid); err != nil || !has {
		t.Errorf("Has = %v, %v", has, err)
	}
	// Writing again is idempotent.
	if err := w.Write(edits); err != nil {
		t.Fatal(err)
	}

	runtimeCache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	ociSpec := &oci.Spec{Process: &oci.Process{Env: []string{"PATH=/bin"}}}
	if unresolved, err := runtimeCache.InjectDevices(ociSpec, DeviceID(uid, 1)); err != nil {
		t.Fatalf("inject %v: %v", unresolved, err)
	}
	if !slices.Contains(ociSpec.Process.Env, "DRA_SWAP_LIMIT_BYTES=104857600") {
		t.Errorf("env = %v", ociSpec.Process.Env)
	}
	if ociSpec.Hooks == nil || len(ociSpec.Hooks.CreateRuntime) != 1 || len(ociSpec.Hooks.Poststop) != 1 {
		t.Fatalf("hooks = %+v", ociSpec.Hooks)
	}
	if got := ociSpec.Hooks.CreateRuntime[0].Args; got[1] != "--swap-limit=104857600" || !slices.Contains(got, "--result-index=1") {
		t.Errorf("createRuntime args = %q", got)
	}

	if err := w.Remove(uid); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("spec still there: %v", err)
	}
	if has, err := w.Has(uid); err != nil || has {
		t.Errorf("Has after Remove = %v, %v", has, err)
	}
	if err := w.Remove(uid); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}
