package claimusage

import (
	"maps"
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
	const claimD = "dddddddd-0000-4000-8000-000000000004"
	state, cgroups := t.TempDir(), t.TempDir()
	// container records a share of 1Mi for each claim, 3Mi for claimB
	// (so a container with claims A and B owes a quarter of its use to A).
	container := func(id, group string, used string, claims ...string) {
		t.Helper()
		dir := filepath.Join(state, id)
		if err := hookstate.WriteContainer(dir, hookstate.Container{ID: id, CgroupVersion: 2, CgroupGroup: group}); err != nil {
			t.Fatal(err)
		}
		for i, c := range claims {
			limit := int64(1 << 20)
			if c == claimB {
				limit = 3 << 20
			}
			if err := hookstate.Record(dir, hookstate.ShareKey(c, i), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: limit}}); err != nil {
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
	container("c2", "/kubepods/pod1/c2", "500", claimA, claimB) // A 1Mi, B 3Mi: 125 and 375
	container("c3", "/kubepods/pod2/c3", "")                    // gone: no cgroup
	container("c4", "/kubepods/pod3/c4", "200", claimA, claimD) // D kept unconfirmed: A's part only
	cp := checkpoint.New("boot")
	cp.Claims[claimA] = checkpoint.ClaimInfo{Namespace: "ns", Name: "a"}
	cp.Claims[claimB] = checkpoint.ClaimInfo{Namespace: "ns", Name: "b"}
	cp.Claims[claimC] = checkpoint.ClaimInfo{Namespace: "ns", Name: "c"} // prepared, no container yet
	cp.Claims[claimD] = checkpoint.ClaimInfo{LimitBytes: 1 << 20}        // unconfirmed: no series
	got, err := ByClaim(state, cgroups, cp)
	if err != nil {
		t.Fatal(err)
	}
	want := map[types.NamespacedName]int64{{Namespace: "ns", Name: "a"}: 1000 + 125 + 100, {Namespace: "ns", Name: "b"}: 375, {Namespace: "ns", Name: "c"}: 0}
	if len(got) != len(want) {
		t.Fatalf("usage %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("claim %s uses %d, want %d", k, got[k], v)
		}
	}
}

// TestUsageShares: a container's use is divided among its claims by the
// limit each gives it, the parts adding up to the use exactly.
func TestUsageShares(t *testing.T) {
	const pib = int64(1) << 50
	for _, tc := range []struct {
		name   string
		used   int64
		limits map[string]int64
		want   map[string]int64
	}{
		{name: "one claim", used: 700, limits: map[string]int64{"a": 5}, want: map[string]int64{"a": 700}},
		{name: "by limit", used: 400, limits: map[string]int64{"a": 1, "b": 3}, want: map[string]int64{"a": 100, "b": 300}},
		{name: "rounding to the largest", used: 10, limits: map[string]int64{"a": 1, "b": 2}, want: map[string]int64{"a": 3, "b": 7}},
		{name: "rounding, ties to the first", used: 1000, limits: map[string]int64{"a": 1, "b": 1, "c": 1}, want: map[string]int64{"a": 334, "b": 333, "c": 333}},
		{name: "nothing used", used: 0, limits: map[string]int64{"a": 1, "b": 1}, want: map[string]int64{"a": 0, "b": 0}},
		{name: "limits of 0: equal", used: 9, limits: map[string]int64{"a": 0, "b": 0}, want: map[string]int64{"a": 5, "b": 4}},
		{name: "a PiB: no overflow", used: pib, limits: map[string]int64{"a": pib / 2, "b": pib / 4, "c": pib / 4}, want: map[string]int64{"a": pib / 2, "b": pib / 4, "c": pib / 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := shares(tc.used, tc.limits)
			if !maps.Equal(got, tc.want) {
				t.Errorf("shares(%d, %v) = %v, want %v", tc.used, tc.limits, got, tc.want)
			}
		})
	}
}
