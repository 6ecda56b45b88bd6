package claimstatus

import (
	"time"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/offload"
)

// offloadStatusPeriod is the least time between two writes of a claim's
// status for its offload figures alone: they change every interval, the
// claim's readers need them only roughly.
const offloadStatusPeriod = time.Minute

// OffloadStatus is a claim's offload, in its device status data.
type OffloadStatus struct {
	// State is the loop's state of the claim's containers: Offloading,
	// OverBudget (paused), AtSwapLimit, Idle, Exhausted, Refaulting or
	// Sampling.
	State offload.Reason `json:"state"`
	// SwapBytes is the swap its containers use (memory.swap.current),
	// SwapPeakBytes the highest (memory.swap.peak), where the kernel has
	// it.
	SwapBytes     int64  `json:"swapBytes"`
	SwapPeakBytes *int64 `json:"swapPeakBytes,omitempty"`
	// ReclaimedBytes is what the loop had the kernel reclaim from them
	// since the plugin started.
	ReclaimedBytes int64 `json:"reclaimedBytes"`
	// StallPercent is their memory stall over the last interval, the
	// highest of its containers; MaxStallPercent the claim's budget.
	StallPercent    *v1alpha1.StallPercent `json:"stallPercent,omitempty"`
	MaxStallPercent v1alpha1.StallPercent  `json:"maxStallPercent"`
	// Containers is how many of its containers the loop drives.
	Containers int `json:"containers"`
}

// offloadStatus is the status form of a claim's figures.
func offloadStatus(f offload.ClaimFigures) *OffloadStatus {
	s := &OffloadStatus{State: f.Reason, SwapBytes: f.SwapBytes, ReclaimedBytes: f.ReclaimedBytes,
		MaxStallPercent: v1alpha1.StallPercent(f.BudgetPPM / 100), Containers: f.Containers}
	if f.SwapPeakBytes >= 0 {
		v := f.SwapPeakBytes
		s.SwapPeakBytes = &v
	}
	if f.StallPPM >= 0 {
		v := v1alpha1.StallPercent((f.StallPPM + 50) / 100)
		s.StallPercent = &v
	}
	return s
}
