package driver

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

func TestClaimUsage(t *testing.T) {
	const (
		claimA = "aaaaaaaa-0000-4000-8000-000000000001"
		claimB = "bbbbbbbb-0000-4000-8000-000000000002"
		claimC = "cccccccc-0000-4000-8000-000000000003"
	)
	state, cgroups := t.TempDir(), t.TempDir()
	container := func(id, group string, used string, claims ...string) {
		t.Helper()
		dir := filepath.Join(state, id)
		if err := hookstate.WriteContainer(dir, hookstate.Container{ID: id, CgroupVersion: 2, CgroupGroup: group}); err != nil {
			t.Fatal(err)
		}
		for i, c := range claims {
			if err := hookstate.Record(dir, hookstate.ShareKey(c, i), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 1 << 20}}); err != nil {
				t.Fatal(err)
			}
		}
		if used != "" {
			if err := os.MkdirAll(filepath.Join(cgroups, group), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cgroups, group, "memory.swap.current"), []byte(used+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	container("c1", "/kubepods/pod1/c1", "1000", claimA)
	container("c2", "/kubepods/pod1/c2", "500", claimA, claimB) // counts for both
	container("c3", "/kubepods/pod2/c3", "")                    // gone: no cgroup
	cp := checkpoint.New("boot")
	cp.Claims[claimA] = checkpoint.ClaimInfo{Namespace: "ns", Name: "a"}
	cp.Claims[claimB] = checkpoint.ClaimInfo{Namespace: "ns", Name: "b"}
	cp.Claims[claimC] = checkpoint.ClaimInfo{Namespace: "ns", Name: "c"} // prepared, no container yet
	got, err := claimUsage(state, cgroups, cp)
	if err != nil {
		t.Fatal(err)
	}
	want := map[types.NamespacedName]int64{{Namespace: "ns", Name: "a"}: 1500, {Namespace: "ns", Name: "b"}: 500, {Namespace: "ns", Name: "c"}: 0}
	if len(got) != len(want) {
		t.Fatalf("usage %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("claim %s uses %d, want %d", k, got[k], v)
		}
	}
}
