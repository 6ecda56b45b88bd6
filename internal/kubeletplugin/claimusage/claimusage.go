// Package claimusage sums the swap the containers of each prepared claim
// use, from the hook's records (which containers hold a share of which
// claim), the checkpoint (the claims' names) and the cgroups (what they
// use); the plugin turns it into its per-claim usage gauges.
package claimusage

import (
	"maps"
	"math/bits"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
)

// ByClaim sums the swap in use by the containers of each prepared
// claim: the hook's records say which containers hold a share of which
// claim, the checkpoint names the claims, the cgroups say what they use. A
// container with several claims counts for each with that claim's part of
// its limit (shares), so that the claims' usage adds up to the
// containers'. Unconfirmed entries (specs kept without a name) get no
// series.
func ByClaim(stateDir, cgroupRoot string, cp *checkpoint.Checkpoint) (map[types.NamespacedName]int64, error) {
	out := map[types.NamespacedName]int64{}
	for _, c := range cp.Claims {
		if c.Confirmed() {
			out[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = 0
		}
	}
	ids, err := hookstate.List(stateDir)
	if err != nil {
		return out, err
	}
	for _, id := range ids {
		dir := filepath.Join(stateDir, id)
		c, err := hookstate.ReadContainer(dir)
		if err != nil {
			continue // not yet written, or gone
		}
		claims, err := hookstate.ClaimLimits(dir)
		if err != nil || len(claims) == 0 {
			continue
		}
		used, err := cgroupswap.ReadUsage(c.CgroupVersion, cgroupRoot, c.CgroupGroup)
		if err != nil || used < 0 {
			continue // the container is gone
		}
		for uid, part := range shares(used, claims) {
			if info, ok := cp.Claims[types.UID(uid)]; ok && info.Confirmed() {
				out[types.NamespacedName{Namespace: info.Namespace, Name: info.Name}] += part
			}
		}
	}
	return out, nil
}

// shares divides a container's swap use among its claims in proportion
// to the limit each gives it (limits, by claim UID); the parts add up to
// used exactly: what rounding leaves goes to the claim with the largest
// limit (the first UID of those). Claims that all give nothing share
// equally.
func shares(used int64, limits map[string]int64) map[string]int64 {
	uids := slices.Sorted(maps.Keys(limits))
	out := make(map[string]int64, len(uids))
	if len(uids) == 0 || used <= 0 {
		for _, uid := range uids {
			out[uid] = 0
		}
		return out
	}
	var total uint64
	largest := uids[0]
	for _, uid := range uids {
		total += uint64(max(limits[uid], 0))
		if limits[uid] > limits[largest] {
			largest = uid
		}
	}
	var given int64
	for _, uid := range uids {
		var part uint64
		if total == 0 {
			part = uint64(used) / uint64(len(uids))
		} else {
			// used × limit / total without overflow: the product has
			// 128 bits, the quotient at most used's.
			hi, lo := bits.Mul64(uint64(used), uint64(max(limits[uid], 0)))
			part, _ = bits.Div64(hi, lo, total)
		}
		out[uid] = int64(part)
		given += int64(part)
	}
	out[largest] += used - given
	return out
}
