package cdi

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/utils/ptr"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
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

func TestSpecContent(t *testing.T) {
	w, _ := newTestWriter(t)
	tests := []struct {
		name      string
		edits     ClaimEdits
		wantEnv   []string
		wantApply []string
	}{
		{
			name:      "limit only",
			edits:     ClaimEdits{ClaimUID: uid, SwapLimitBytes: 2 << 30, EnvBytes: 2 << 30},
			wantEnv:   []string{"DRA_SWAP_LIMIT_BYTES=2147483648"},
			wantApply: []string{"dra-swap-hook", "--swap-limit=2147483648", "--claim-uid=" + uid, "--state-dir=/run/dra-swap/hook"},
		},
		{
			name:      "env is the container total",
			edits:     ClaimEdits{ClaimUID: uid, SwapLimitBytes: 1 << 20, EnvBytes: 3 << 20},
			wantEnv:   []string{"DRA_SWAP_LIMIT_BYTES=3145728"},
			wantApply: []string{"dra-swap-hook", "--swap-limit=1048576", "--claim-uid=" + uid, "--state-dir=/run/dra-swap/hook"},
		},
		{
			name:    "all knobs",
			edits:   ClaimEdits{ClaimUID: uid, SwapLimitBytes: 100 << 20, EnvBytes: 100 << 20, SwapHighBytes: ptr.To[int64](80 << 20), Zswap: ZswapOff, Swappiness: ptr.To[int64](0)},
			wantEnv: []string{"DRA_SWAP_LIMIT_BYTES=104857600"},
			wantApply: []string{"dra-swap-hook", "--swap-limit=104857600", "--claim-uid=" + uid, "--state-dir=/run/dra-swap/hook",
				"--swap-high=83886080", "--zswap=off", "--swappiness=0"},
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
			if len(spec.Devices) != 1 || spec.Devices[0].Name != uid {
				t.Fatalf("devices = %+v", spec.Devices)
			}
			edits := spec.Devices[0].ContainerEdits
			if !reflect.DeepEqual(edits.Env, tc.wantEnv) {
				t.Errorf("env = %v, want %v", edits.Env, tc.wantEnv)
			}
			if len(edits.Hooks) != 2 {
				t.Fatalf("hooks = %+v", edits.Hooks)
			}
			apply, cleanup := edits.Hooks[0], edits.Hooks[1]
			if apply.HookName != "createRuntime" || apply.Path != "/opt/dra-swap/bin/dra-swap-hook" || *apply.Timeout != HookTimeoutSeconds {
				t.Errorf("apply hook = %+v", apply)
			}
			if !reflect.DeepEqual(apply.Args, tc.wantApply) {
				t.Errorf("apply args = %q, want %q", apply.Args, tc.wantApply)
			}
			wantCleanup := []string{"dra-swap-hook", "--cleanup", "--claim-uid=" + uid, "--state-dir=/run/dra-swap/hook"}
			if cleanup.HookName != "poststop" || !reflect.DeepEqual(cleanup.Args, wantCleanup) {
				t.Errorf("cleanup hook = %+v", cleanup)
			}
		})
	}
}

func TestSpecRejectsBadEdits(t *testing.T) {
	w, _ := newTestWriter(t)
	for name, e := range map[string]ClaimEdits{
		"uid with path":    {ClaimUID: "../../etc/passwd"},
		"uid with spaces":  {ClaimUID: uid + " --swap-limit=1"},
		"uppercase uid":    {ClaimUID: strings.ToUpper(uid)},
		"negative limit":   {ClaimUID: uid, SwapLimitBytes: -1},
		"high above limit": {ClaimUID: uid, SwapLimitBytes: 10, SwapHighBytes: ptr.To[int64](11)},
		"bad zswap":        {ClaimUID: uid, Zswap: "--x"},
		"swappiness 101":   {ClaimUID: uid, Swappiness: ptr.To[int64](101)},
	} {
		if _, err := w.Spec(e); err == nil {
			t.Errorf("%s: Spec accepted %+v", name, e)
		}
		if _, err := w.Write(e); err == nil {
			t.Errorf("%s: Write accepted %+v", name, e)
		}
	}
	if err := w.Remove("../x"); err == nil {
		t.Error("Remove accepted a bad UID")
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
// CDI library reads it back and injects it into an OCI spec.
func TestWriteInjectRemove(t *testing.T) {
	w, dir := newTestWriter(t)
	id, err := w.Write(ClaimEdits{ClaimUID: uid, SwapLimitBytes: 300 << 20, EnvBytes: 300 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if id != "dra.swap/swap="+uid {
		t.Errorf("device ID = %q", id)
	}
	file := filepath.Join(dir, "dra.swap-swap_"+uid+".json")
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("spec file: %v", err)
	}
	// Writing again is idempotent.
	if _, err := w.Write(ClaimEdits{ClaimUID: uid, SwapLimitBytes: 300 << 20, EnvBytes: 300 << 20}); err != nil {
		t.Fatal(err)
	}

	runtimeCache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	ociSpec := &oci.Spec{Process: &oci.Process{Env: []string{"PATH=/bin"}}}
	if unresolved, err := runtimeCache.InjectDevices(ociSpec, id); err != nil {
		t.Fatalf("inject %v: %v", unresolved, err)
	}
	if !slices.Contains(ociSpec.Process.Env, "DRA_SWAP_LIMIT_BYTES=314572800") {
		t.Errorf("env = %v", ociSpec.Process.Env)
	}
	if ociSpec.Hooks == nil || len(ociSpec.Hooks.CreateRuntime) != 1 || len(ociSpec.Hooks.Poststop) != 1 {
		t.Fatalf("hooks = %+v", ociSpec.Hooks)
	}
	if got := ociSpec.Hooks.CreateRuntime[0].Args[1]; got != "--swap-limit=314572800" {
		t.Errorf("createRuntime args = %q", ociSpec.Hooks.CreateRuntime[0].Args)
	}

	if err := w.Remove(uid); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("spec still there: %v", err)
	}
	if err := w.Remove(uid); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}
