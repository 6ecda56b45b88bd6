package cdi

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// TestReadGivesTheEditsBack: Read of what Write wrote is the edits, for
// every shape of claim the writer knows.
func TestReadGivesTheEditsBack(t *testing.T) {
	for name, edits := range map[string]ClaimEdits{
		"golden: three results, every knob, a pod and its budget, admin access": goldenEdits,
		"limit only, no pod": {ClaimUID: uid, Devices: []DeviceEdits{{ResultIndex: 0, Settings: swapsettings.Settings{LimitBytes: 5 << 20}, EnvLimitBytes: 7 << 20}}},
		"admin access first": {ClaimUID: uid, PodUID: podUID, Devices: []DeviceEdits{
			{ResultIndex: 0, AdminAccess: true},
			{ResultIndex: 4, Settings: swapsettings.Settings{LimitBytes: 1, Zswap: swapsettings.ZswapOn, Swappiness: ptr.To[uint64](0)}, EnvLimitBytes: 1},
		}},
		"admin access only": {ClaimUID: uid, Devices: []DeviceEdits{{ResultIndex: 2, AdminAccess: true}}},
	} {
		t.Run(name, func(t *testing.T) {
			w, _ := newTestWriter(t)
			if err := w.Write(edits); err != nil {
				t.Fatal(err)
			}
			got, err := w.Read(edits.ClaimUID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, edits) {
				t.Errorf("Read = %+v\nwant %+v", got, edits)
			}
		})
	}
}

// TestReadReleasedSpecs: the specs of releases (their goldens) read back
// into the edits they were written from.
func TestReadReleasedSpecs(t *testing.T) {
	for file, want := range map[string]ClaimEdits{"v0.2.0-spec.json": goldenEdits} {
		t.Run(file, func(t *testing.T) {
			w, dir := newTestWriter(t)
			data, err := os.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, SpecName(goldenUID)+".json"), data, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := w.Read(goldenUID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Read = %+v\nwant %+v", got, want)
			}
			if id := DeviceID(goldenUID, got.Devices[0].ResultIndex); !strings.HasSuffix(id, "="+mustDeviceName(t, data)) {
				t.Errorf("DeviceID of the first device read = %s, not the spec's", id)
			}
		})
	}
}

// mustDeviceName is the first device's name in a spec.
func mustDeviceName(t *testing.T, spec []byte) string {
	t.Helper()
	_, rest, ok := strings.Cut(string(spec), `"devices":[{"name":"`)
	name, _, ok2 := strings.Cut(rest, `"`)
	if !ok || !ok2 {
		t.Fatalf("no device name in %s", spec)
	}
	return name
}

// TestReadRefuses: what is not a spec this driver wrote for the claim is
// an error naming what is wrong, never edits.
func TestReadRefuses(t *testing.T) {
	const other = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	hookArgs := `"args":["dra-swap-hook","--swap-limit=1048576","--claim-uid=` + uid + `","--state-dir=/run/dra-swap/hook","--result-index=0"]`
	device := func(name, env, args string) string {
		return `{"cdiVersion":"0.5.0","kind":"dra.swap/swap","devices":[{"name":"` + name + `","containerEdits":{"env":["` + env +
			`"],"hooks":[{"hookName":"createRuntime","path":"/opt/dra-swap/bin/dra-swap-hook",` + args + `}]}}]}`
	}
	for name, tc := range map[string]struct{ content, want string }{
		"not JSON":                 {`{"cdiVersion":`, "unexpected end of JSON input"},
		"another kind":             {`{"cdiVersion":"0.5.0","kind":"vendor.example/gpu","devices":[]}`, `kind "vendor.example/gpu"`},
		"no devices":               {`{"cdiVersion":"0.5.0","kind":"dra.swap/swap","devices":[]}`, "0 devices"},
		"another claim's device":   {device(other+"-0", "DRA_SWAP_LIMIT_BYTES=1048576", hookArgs), "is not one of claim"},
		"the claim's UID alone":    {device(uid, "DRA_SWAP_LIMIT_BYTES=1048576", strings.Replace(hookArgs, `,"--result-index=0"`, "", 1)), "is not one of claim"},
		"unknown variable":         {device(uid+"-0", "PATH=/bin", hookArgs), `"PATH" is not this driver's`},
		"negative env":             {device(uid+"-0", "DRA_SWAP_LIMIT_BYTES=-1", hookArgs), "is not a byte count"},
		"hook of another result":   {device(uid+"-1", "DRA_SWAP_LIMIT_BYTES=1048576", hookArgs), "not this device's"},
		"hook a newer release":     {device(uid+"-0", "DRA_SWAP_LIMIT_BYTES=1048576", strings.Replace(hookArgs, `"--result-index=0"`, `"--result-index=0","--from-the-future"`, 1)), "unknown to this hook"},
		"admin access with a hook": {device(uid+"-0", "DRA_SWAP_ADMIN_ACCESS=true", hookArgs), "want true and none"},
	} {
		t.Run(name, func(t *testing.T) {
			w, dir := newTestWriter(t)
			if err := os.WriteFile(filepath.Join(dir, SpecName(uid)+".json"), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := w.Read(uid)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read = %+v, %v; want an error containing %q", got, err, tc.want)
			}
		})
	}
	w, _ := newTestWriter(t)
	if _, err := w.Read(uid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a missing spec = %v, want fs.ErrNotExist", err)
	}
	if _, err := w.Read("../" + uid); err == nil {
		t.Error("Read of a path, not a UID, succeeded")
	}
}
