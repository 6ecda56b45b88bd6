package nri

import (
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

const (
	hookPath = "/opt/dra-swap/bin/dra-swap-hook"
	uidA     = "aaaaaaaa-0000-4000-8000-000000000001"
	uidB     = "bbbbbbbb-0000-4000-8000-000000000002"
	podUID   = "cccccccc-0000-4000-8000-000000000003"
	otherPod = "dddddddd-0000-4000-8000-000000000004"
	mi       = int64(1) << 20
)

// applyHook is a createRuntime hook of the claim's result 0, or of the
// result that extra names.
func applyHook(uid string, bytes string, extra ...string) *api.Hook {
	args := append([]string{"dra-swap-hook", "--swap-limit=" + bytes, "--claim-uid=" + uid, "--state-dir=/run/dra-swap/hook"}, extra...)
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--result-index=") }) {
		args = append(args, "--result-index=0")
	}
	return &api.Hook{Path: hookPath, Args: args}
}

func cleanupHook(uid string) *api.Hook {
	return &api.Hook{Path: hookPath, Args: []string{"dra-swap-hook", "--cleanup", "--claim-uid=" + uid, "--state-dir=/run/dra-swap/hook"}}
}

func container(memLimit int64, hooks ...*api.Hook) *api.Container {
	c := &api.Container{Id: "ctr", Name: "worker", Hooks: &api.Hooks{
		CreateRuntime: hooks,
		Poststop:      []*api.Hook{cleanupHook(uidA)},
	}}
	if memLimit > 0 {
		c.Linux = &api.LinuxContainer{Resources: &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(memLimit)}}}
	}
	return c
}

func TestCreateAdjustment(t *testing.T) {
	other := &api.Hook{Path: "/usr/bin/other-hook", Args: []string{"other-hook", "--swap-limit=999"}}
	tests := []struct {
		name        string
		version     int
		ctr         *api.Container
		wantUnified string // v2 memory.swap.max, "" for none
		wantSwap    int64  // v1 memory.swap, 0 for none
		wantNone    bool
		wantErr     string
	}{
		{name: "v2 one claim", version: 2, ctr: container(128*mi, applyHook(uidA, "104857600")), wantUnified: "104857600"},
		{name: "v2 two claims add up", version: 2, ctr: container(0, applyHook(uidA, "104857600"), applyHook(uidB, "1048576")), wantUnified: "105906176"},
		{name: "v2 two results of one claim add up", version: 2, ctr: container(0, applyHook(uidA, "104857600", "--result-index=0"), applyHook(uidA, "1048576", "--result-index=1")), wantUnified: "105906176"},
		{name: "v2 a result named twice counts once", version: 2, ctr: container(0, applyHook(uidA, "104857600", "--result-index=0"), applyHook(uidA, "104857600", "--result-index=0")), wantUnified: "104857600"},
		{name: "v2 granted to this pod", version: 2, ctr: container(0, applyHook(uidA, "104857600", "--result-index=0", "--pod-uid="+podUID)), wantUnified: "104857600"},
		{name: "granted to another pod: left to the hook, which refuses it", version: 2, ctr: container(0, applyHook(uidA, "104857600", "--result-index=0", "--pod-uid="+otherPod)), wantNone: true},
		{name: "v1 memsw is the memory limit plus the claims", version: 1, ctr: container(128*mi, applyHook(uidA, "104857600")), wantSwap: 228 * mi},
		{name: "v1 without a memory limit: left to the hook", version: 1, ctr: container(0, applyHook(uidA, "104857600")), wantNone: true},
		{name: "no dra.swap claim", version: 2, ctr: container(128*mi, other), wantNone: true},
		{name: "no hooks at all", version: 2, ctr: &api.Container{Id: "ctr"}, wantNone: true},
		{name: "a malformed argument is an error, not a guess", version: 2, ctr: container(128*mi, applyHook(uidA, "1e9")), wantErr: "--swap-limit"},
		{name: "an unknown flag is an error", version: 2, ctr: container(128*mi, &api.Hook{Path: hookPath, Args: []string{"dra-swap-hook", "--swap-limit=1", "--claim-uid=" + uidA, "--future"}}), wantErr: "newer dra.swap release"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			adjust, _, err := CreateAdjustment(tc.version, hookPath, podUID, tc.ctr)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantNone {
				if adjust != nil {
					t.Fatalf("adjustment %v, want none", adjust)
				}
				return
			}
			res := adjust.GetLinux().GetResources()
			if got := res.GetUnified()["memory.swap.max"]; got != tc.wantUnified {
				t.Errorf("unified memory.swap.max %q, want %q", got, tc.wantUnified)
			}
			if swap := swapOf(res); swap != tc.wantSwap {
				t.Errorf("memory.swap %d, want %d", swap, tc.wantSwap)
			}
			if l := res.GetMemory().GetLimit(); l != nil {
				t.Errorf("the adjustment changes the memory limit to %d; it must not", l.GetValue())
			}
		})
	}
}

func TestUpdateFor(t *testing.T) {
	resized := &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(192 * mi), Swap: api.Int64(192 * mi)}}
	tests := []struct {
		name        string
		version     int
		res         *api.LinuxResources
		wantUnified string
		wantSwap    int64
	}{
		{name: "v2", version: 2, res: resized, wantUnified: "104857600"},
		{name: "v1: the new memory limit plus the claims", version: 1, res: resized, wantSwap: 292 * mi},
		{name: "v1 without a memory limit in the update", version: 1, res: &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(512)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := UpdateFor(tc.version, "ctr", 100*mi, tc.res)
			if u.GetContainerId() != "ctr" || !u.GetIgnoreFailure() {
				t.Errorf("update %v: want container ctr, failure ignored", u)
			}
			res := u.GetLinux().GetResources()
			if got := res.GetUnified()["memory.swap.max"]; got != tc.wantUnified {
				t.Errorf("unified memory.swap.max %q, want %q", got, tc.wantUnified)
			}
			if swap := swapOf(res); swap != tc.wantSwap {
				t.Errorf("memory.swap %d, want %d", swap, tc.wantSwap)
			}
		})
	}
}

// swapOf is the memory.swap a resource set names, 0 for none.
func swapOf(res *api.LinuxResources) int64 {
	if s := res.GetMemory().GetSwap(); s != nil {
		return s.GetValue()
	}
	return 0
}
