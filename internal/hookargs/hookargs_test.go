package hookargs

import (
	"reflect"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// Two claims' UIDs, for requests.
const (
	claimA = "00000000-0000-4000-8000-00000000000a"
	claimB = "00000000-0000-4000-8000-00000000000b"
)

// TestFormatArgs: FormatArgs writes each request in the forms of the
// released CDI specs (see ParseArgs), and ParseArgs reads them back to the
// same configuration and request.
func TestFormatArgs(t *testing.T) {
	const podUID = "3f2e1d0c-9b8a-4766-8554-433221100fed"
	spec := SpecConfig(DefaultStateDir)
	share := func(s swapsettings.Settings, podLimit *int64) hookstate.Share {
		return hookstate.Share{Settings: s, PodLimitBytes: podLimit}
	}
	tests := []struct {
		name string
		cfg  Config
		req  Request
		want []string
	}{
		{
			name: "one result, every knob, granted to a pod with a budget",
			cfg:  spec,
			req: Request{ClaimUID: claimA, ResultIndex: 0, PodUID: podUID, Share: share(swapsettings.Settings{LimitBytes: 1 << 30, HighBytes: ptr[int64](858993459),
				Zswap: swapsettings.ZswapOff, Swappiness: ptr[uint64](10)}, ptr[int64](3<<29))},
			want: []string{"--swap-limit=1073741824", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook",
				"--swap-high=858993459", "--zswap=off", "--swappiness=10", "--result-index=0", "--pod-uid=" + podUID, "--pod-swap-limit=1610612736"},
		},
		{
			name: "compressed only and offload",
			cfg:  spec,
			req: Request{ClaimUID: claimA, ResultIndex: 2, PodUID: podUID, Share: share(swapsettings.Settings{LimitBytes: 1 << 30,
				ZswapWritebackOff: true, OffloadMaxStall: ptr[int32](50)}, nil)},
			want: []string{"--swap-limit=1073741824", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook",
				"--result-index=2", "--pod-uid=" + podUID, "--zswap-writeback=off", "--offload-max-stall=50"},
		},
		{
			name: "limit only",
			cfg:  spec,
			req:  Request{ClaimUID: claimB, ResultIndex: 1, Share: share(swapsettings.Settings{LimitBytes: 5 << 20}, nil)},
			want: []string{"--swap-limit=5242880", "--claim-uid=" + claimB, "--state-dir=/run/dra-swap/hook", "--result-index=1"},
		},
		{
			name: "zeros and zswap on",
			cfg:  spec,
			req: Request{ClaimUID: claimB, ResultIndex: 0, Share: share(swapsettings.Settings{HighBytes: ptr[int64](0), Zswap: swapsettings.ZswapOn,
				Swappiness: ptr[uint64](0)}, ptr[int64](0))},
			want: []string{"--swap-limit=0", "--claim-uid=" + claimB, "--state-dir=/run/dra-swap/hook",
				"--swap-high=0", "--zswap=on", "--swappiness=0", "--result-index=0", "--pod-swap-limit=0"},
		},
		{
			name: "largest values",
			cfg:  spec,
			req: Request{ClaimUID: claimB, ResultIndex: limits.MaxResultIndex, Share: share(swapsettings.Settings{LimitBytes: limits.MaxSwapBytes,
				HighBytes: ptr(limits.MaxSwapBytes), Swappiness: ptr[uint64](swapsettings.MaxSwappiness)}, ptr(limits.MaxSwapBytes))},
			want: []string{"--swap-limit=1125899906842624", "--claim-uid=" + claimB, "--state-dir=/run/dra-swap/hook",
				"--swap-high=1125899906842624", "--swappiness=100", "--result-index=9999", "--pod-swap-limit=1125899906842624"},
		},
		{
			name: "cleanup",
			cfg:  spec,
			req:  Request{Cleanup: true, ClaimUID: claimA, ResultIndex: -1},
			want: []string{"--cleanup", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook"},
		},
		{
			name: "test-only roots",
			cfg:  Config{StateDir: "/state", ProcRoot: "/host/proc", CgroupRoot: "/host/cgroup"},
			req:  Request{ClaimUID: claimA, ResultIndex: 0, Share: share(swapsettings.Settings{LimitBytes: 1}, nil)},
			want: []string{"--swap-limit=1", "--claim-uid=" + claimA, "--state-dir=/state", "--result-index=0", "--proc-root=/host/proc", "--cgroup-root=/host/cgroup"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := FormatArgs(tc.cfg, tc.req)
			if !reflect.DeepEqual(args, tc.want) {
				t.Errorf("FormatArgs = %q, want %q", args, tc.want)
			}
			cfg, req, err := ParseArgs(args)
			if err != nil {
				t.Fatalf("ParseArgs(%q): %v", args, err)
			}
			if !reflect.DeepEqual(cfg, tc.cfg) || !reflect.DeepEqual(req, tc.req) {
				t.Errorf("ParseArgs(%q) = %+v, %s; want %+v, %s", args, cfg, showRequest(req), tc.cfg, showRequest(tc.req))
			}
		})
	}
}

// TestParseArgsRequiresResultIndex: a createRuntime hook names the
// allocation result it applies; without --result-index it is refused, not
// taken for the whole claim.
func TestParseArgsRequiresResultIndex(t *testing.T) {
	_, _, err := ParseArgs([]string{"--swap-limit=1073741824", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook"})
	if err == nil || err.Error() != "--result-index is required" {
		t.Fatalf("ParseArgs without --result-index: %v, want --result-index is required", err)
	}
}
