package discovery

import "fmt"

// Usable reports whether the node can offer swap to pods and, when it
// cannot, a human-readable reason: there is no active swap device, the
// devices add up to nothing, the cgroup version is unknown, the cgroup
// file that limits a container's swap is missing, or the hook cannot run.
func (f Facts) Usable() (bool, string) {
	switch {
	case len(f.Devices) == 0:
		return false, "no active swap device in /proc/swaps (swap is off)"
	case f.TotalBytes <= 0:
		return false, "the active swap devices in /proc/swaps have a total size of 0 bytes"
	case f.CgroupVersion == 0:
		return false, "cgroup version unknown: neither the cgroup v2 hierarchy nor the v1 memory controller is mounted at " + cgroupMount
	case !f.SwapControl:
		return false, missingSwapControl(f.CgroupVersion)
	case f.HookProblem != "":
		return false, f.HookProblem
	}
	return true, ""
}

// missingSwapControl explains the absence of the swap control file of a
// cgroup version.
func missingSwapControl(version int) string {
	if version == 1 {
		return "cgroup v1 swap control file " + swapControlV1 + " is missing (swap accounting is off; boot with swapaccount=1)"
	}
	return fmt.Sprintf("cgroup v%d swap control file %s is missing (the memory controller is not enabled for child cgroups, or swap accounting is off)", version, swapControlV2)
}
