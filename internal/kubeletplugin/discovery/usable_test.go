package discovery

import (
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

func TestFactsUsable(t *testing.T) {
	usable := baseFacts(SwapDevice{Path: "/swapfile", Type: "file", SizeBytes: 1 << 30, Medium: MediumSSD})
	tests := []struct {
		name       string
		mutate     func(f *Facts)
		wantReason string // empty: usable
	}{
		{name: "usable", mutate: func(*Facts) {}},
		{name: "usable on cgroup v1", mutate: func(f *Facts) { f.CgroupVersion = 1 }},
		{name: "usable with unknown swap behavior", mutate: func(f *Facts) { f.SwapBehavior = v1alpha1.SwapBehaviorUnknown }},
		{name: "no device", mutate: func(f *Facts) { f.Devices, f.TotalBytes = nil, 0 }, wantReason: "no active swap device"},
		{name: "zero size", mutate: func(f *Facts) { f.Devices[0].SizeBytes, f.TotalBytes = 0, 0 }, wantReason: "total size of 0 bytes"},
		{name: "unknown cgroup version", mutate: func(f *Facts) { f.CgroupVersion, f.SwapControl = 0, false }, wantReason: "cgroup version unknown"},
		{name: "v2 without memory.swap.max", mutate: func(f *Facts) { f.SwapControl = false }, wantReason: "cgroup v2 swap control file memory.swap.max is missing"},
		{name: "v1 without memsw", mutate: func(f *Facts) { f.CgroupVersion, f.SwapControl = 1, false }, wantReason: "cgroup v1 swap control file memory.memsw.limit_in_bytes is missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := usable
			f.Devices = append([]SwapDevice(nil), usable.Devices...)
			tc.mutate(&f)
			ok, reason := f.Usable()
			if ok != (tc.wantReason == "") || !strings.Contains(reason, tc.wantReason) || ok != (reason == "") {
				t.Errorf("Usable() = %t, %q; want reason %q", ok, reason, tc.wantReason)
			}
		})
	}
}
