package cdi

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/utils/ptr"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/dra-driver-swap/dra-driver-swap/internal/hookargs"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// The CDI specs of prepared claims outlive the plugin that wrote them: after
// an upgrade the new hook runs the specs the old plugin wrote. These tests
// hold the writer and the hook to the append-only argument contract
// documented on hookargs.ParseArgs.
//
// testdata/<release>-spec.json is a spec exactly as that release's writer
// wrote it (JSON has no comments, so its provenance is recorded here):
//
//   - v0.2.0-spec.json: written by Writer.Write of release 0.2.0, the
//     first release (none was published before it), for goldenEdits, with
//     hook path /opt/dra-swap/bin/dra-swap-hook and hook state directory
//     /run/dra-swap/hook (the kubelet plugin's defaults): one device per
//     allocation result, named <claim UID>-<result index>, granted to one
//     pod with a pod budget, and an admin-access result.
//
// Until 0.2.0 is released its spec follows the writer (UPDATE_GOLDEN=1
// rewrites it). A released spec is never edited or removed: once 0.2.0 is
// out, when the writer's output changes TestWriterOutputIsTheNewestGolden
// fails; add the new output as testdata/<next release>-spec.json, set
// newestGoldenVer to it and add a releasedSpecs entry for it.

const (
	goldenUID       = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	goldenHookPath  = "/opt/dra-swap/bin/dra-swap-hook"
	goldenStateDir  = "/run/dra-swap/hook"
	goldenPodUID    = "3f2e1d0c-9b8a-4766-8554-433221100fed"
	newestGoldenVer = "v0.2.0"
)

// goldenEdits is a claim with three results: one with every knob set
// (swap limit, swap high, zswap and swappiness), one with a limit only,
// one with admin access; granted to one pod, with that pod's budget.
var goldenEdits = ClaimEdits{
	ClaimUID:      goldenUID,
	PodUID:        goldenPodUID,
	PodLimitBytes: ptr.To[int64](3 << 29),
	Devices: []DeviceEdits{
		{ResultIndex: 0, Settings: swapsettings.Settings{LimitBytes: 1 << 30, HighBytes: ptr.To[int64](858993459), Zswap: swapsettings.ZswapOff, Swappiness: ptr.To[uint64](10)}, EnvLimitBytes: 3 << 29},
		{ResultIndex: 1, Settings: swapsettings.Settings{LimitBytes: 1 << 29}, EnvLimitBytes: 1 << 29},
		{ResultIndex: 2, AdminAccess: true},
	},
}

// parsed is what the hook makes of one hook's arguments.
type parsed struct {
	cfg hookargs.Config
	req hookargs.Request
}

var goldenConfig = hookargs.Config{ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup", StateDir: goldenStateDir}

// releasedDevice is one device of a released spec and what today's hook
// must make of its createRuntime and poststop hooks.
type releasedDevice struct {
	name    string
	env     string
	apply   parsed
	cleanup parsed
}

// releasedSpecs are the released specs.
var releasedSpecs = []struct {
	file    string
	devices []releasedDevice
}{
	{
		file: "v0.2.0-spec.json",
		devices: []releasedDevice{
			{
				name:    goldenUID + "-0",
				env:     "DRA_SWAP_LIMIT_BYTES=1610612736",
				apply:   parsed{cfg: goldenConfig, req: hookargs.Request{ClaimUID: goldenUID, ResultIndex: 0, PodUID: goldenPodUID, Share: hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 1 << 30, HighBytes: ptr.To[int64](858993459), Zswap: swapsettings.ZswapOff, Swappiness: ptr.To[uint64](10)}, PodLimitBytes: ptr.To[int64](3 << 29)}}},
				cleanup: parsed{cfg: goldenConfig, req: hookargs.Request{Cleanup: true, ClaimUID: goldenUID, ResultIndex: -1}},
			},
			{
				name:    goldenUID + "-1",
				env:     "DRA_SWAP_LIMIT_BYTES=536870912",
				apply:   parsed{cfg: goldenConfig, req: hookargs.Request{ClaimUID: goldenUID, ResultIndex: 1, PodUID: goldenPodUID, Share: hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 1 << 29}, PodLimitBytes: ptr.To[int64](3 << 29)}}},
				cleanup: parsed{cfg: goldenConfig, req: hookargs.Request{Cleanup: true, ClaimUID: goldenUID, ResultIndex: -1}},
			},
			{name: goldenUID + "-2", env: "DRA_SWAP_ADMIN_ACCESS=true"},
		},
	},
}

// inject reads the specs in dir with the CDI library, as a container
// runtime does, and injects the named device of the claims' kind into an
// OCI spec. A device with hooks must bring one createRuntime and one
// poststop hook.
func inject(t *testing.T, dir, device string) *oci.Spec {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("CDI library rejects the specs in %s: %v", dir, errs)
	}
	ociSpec := &oci.Spec{Process: &oci.Process{}}
	if unresolved, err := cache.InjectDevices(ociSpec, Vendor+"/"+Class+"="+device); err != nil {
		t.Fatalf("inject %v: %v", unresolved, err)
	}
	if ociSpec.Hooks != nil && (len(ociSpec.Hooks.CreateRuntime) != 1 || len(ociSpec.Hooks.Poststop) != 1) {
		t.Fatalf("hooks = %+v, want one createRuntime and one poststop hook", ociSpec.Hooks)
	}
	return ociSpec
}

// parseHook runs the hook's parser on an OCI hook's argv the way runc
// starts it: argv[0] is the program name, the rest its arguments.
func parseHook(t *testing.T, h oci.Hook) parsed {
	t.Helper()
	if h.Path != goldenHookPath || len(h.Args) == 0 || h.Args[0] != filepath.Base(goldenHookPath) {
		t.Fatalf("hook %+v does not run %s", h, goldenHookPath)
	}
	cfg, req, err := hookargs.ParseArgs(h.Args[1:])
	if err != nil {
		t.Fatalf("today's hook rejects %q: %v", h.Args, err)
	}
	return parsed{cfg: cfg, req: req}
}

// TestReleasedSpecsStillWork feeds every released spec through the CDI
// library and its hook arguments through today's hook parser.
func TestReleasedSpecsStillWork(t *testing.T) {
	for _, rs := range releasedSpecs {
		t.Run(rs.file, func(t *testing.T) {
			dir := t.TempDir()
			data, err := os.ReadFile(filepath.Join("testdata", rs.file))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, SpecName(goldenUID)+".json"), data, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, d := range rs.devices {
				ociSpec := inject(t, dir, d.name)
				if !reflect.DeepEqual(ociSpec.Process.Env, []string{d.env}) {
					t.Errorf("device %s: env = %q, want %q", d.name, ociSpec.Process.Env, d.env)
				}
				if d.apply.cfg == (hookargs.Config{}) {
					if ociSpec.Hooks != nil {
						t.Errorf("device %s: hooks %+v, want none", d.name, ociSpec.Hooks)
					}
					continue
				}
				if ociSpec.Hooks == nil {
					t.Fatalf("device %s: no hooks", d.name)
				}
				if got := parseHook(t, ociSpec.Hooks.CreateRuntime[0]); !reflect.DeepEqual(got, d.apply) {
					t.Errorf("device %s: createRuntime hook parses as %s, want %s", d.name, show(got), show(d.apply))
				}
				if got := parseHook(t, ociSpec.Hooks.Poststop[0]); !reflect.DeepEqual(got, d.cleanup) {
					t.Errorf("device %s: poststop hook parses as %s, want %s", d.name, show(got), show(d.cleanup))
				}
			}
		})
	}
}

func show(p parsed) string {
	s := p.req.Share
	return fmt.Sprintf("{cleanup:%v claim:%s result:%d pod:%s stateDir:%s procRoot:%s cgroupRoot:%s limit:%d high:%s zswap:%s swappiness:%s podLimit:%s}",
		p.req.Cleanup, p.req.ClaimUID, p.req.ResultIndex, p.req.PodUID, p.cfg.StateDir, p.cfg.ProcRoot, p.cfg.CgroupRoot,
		s.LimitBytes, deref(s.HighBytes), s.Zswap, deref(s.Swappiness), deref(s.PodLimitBytes))
}

func deref[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// TestWriterOutputIsTheNewestGolden compares today's writer with the
// newest released spec for the same claim, byte for byte, so that any
// change to what the writer produces is a deliberate new golden.
func TestWriterOutputIsTheNewestGolden(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(dir, goldenHookPath, goldenStateDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(goldenEdits); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("UPDATE_GOLDEN") != "" {
		data, err := os.ReadFile(filepath.Join(dir, SpecName(goldenUID)+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", newestGoldenVer+"-spec.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, SpecName(goldenUID)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", newestGoldenVer+"-spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the writer's output changed:\n got %s\nwant %s\n"+
			"If intended, keep testdata/%s-spec.json, add this output as testdata/<next release>-spec.json and list it in releasedSpecs.",
			got, want, newestGoldenVer)
	}
}

// TestWriterOutputParses checks that whatever today's writer produces,
// today's hook parses back to the same values.
func TestWriterOutputParses(t *testing.T) {
	tests := []struct {
		name  string
		edits ClaimEdits
		want  hookargs.Request
	}{
		{name: "limit only", edits: ClaimEdits{ClaimUID: goldenUID, Devices: []DeviceEdits{{ResultIndex: 0, Settings: swapsettings.Settings{LimitBytes: 5 << 20}, EnvLimitBytes: 5 << 20}}},
			want: hookargs.Request{ClaimUID: goldenUID, Share: hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 5 << 20}}}},
		{name: "every knob", edits: ClaimEdits{ClaimUID: goldenUID, Devices: goldenEdits.Devices[:1]},
			want: hookargs.Request{ClaimUID: goldenUID, Share: hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 1 << 30, HighBytes: ptr.To[int64](858993459), Zswap: swapsettings.ZswapOff, Swappiness: ptr.To[uint64](10)}}}},
		{name: "zswap on, zero swappiness, pod and budget", edits: ClaimEdits{ClaimUID: goldenUID, PodUID: goldenPodUID, PodLimitBytes: ptr.To[int64](7),
			Devices: []DeviceEdits{{ResultIndex: 5, Settings: swapsettings.Settings{LimitBytes: 1, Zswap: swapsettings.ZswapOn, Swappiness: ptr.To[uint64](0)}, EnvLimitBytes: 1}}},
			want: hookargs.Request{ClaimUID: goldenUID, ResultIndex: 5, PodUID: goldenPodUID,
				Share: hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 1, Zswap: swapsettings.ZswapOn, Swappiness: ptr.To[uint64](0)}, PodLimitBytes: ptr.To[int64](7)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := NewWriter(dir, goldenHookPath, goldenStateDir)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(tc.edits); err != nil {
				t.Fatal(err)
			}
			ociSpec := inject(t, dir, DeviceName(tc.edits.ClaimUID, tc.edits.Devices[0].ResultIndex))
			apply := parsed{cfg: goldenConfig, req: tc.want}
			if got := parseHook(t, ociSpec.Hooks.CreateRuntime[0]); !reflect.DeepEqual(got, apply) {
				t.Errorf("createRuntime hook parses as %s, want %s", show(got), show(apply))
			}
			cleanup := parsed{cfg: goldenConfig, req: hookargs.Request{Cleanup: true, ClaimUID: goldenUID, ResultIndex: -1}}
			if got := parseHook(t, ociSpec.Hooks.Poststop[0]); !reflect.DeepEqual(got, cleanup) {
				t.Errorf("poststop hook parses as %s, want %s", show(got), show(cleanup))
			}
		})
	}
}
