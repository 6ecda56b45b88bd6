package prepare

import (
	"reflect"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// TestSettingsFor: a result's consumed capacity and merged SwapConfig
// become the settings each container it reaches gets: swap.high as the
// percentage of the limit (rounded down), zswap's three modes, swappiness
// as it is.
func TestSettingsFor(t *testing.T) {
	tests := []struct {
		name   string
		limit  int64
		config v1alpha1.SwapConfig
		want   swapsettings.Settings
	}{
		{name: "limit only", limit: 100 << 20, config: v1alpha1.SwapConfig{Zswap: v1alpha1.ZswapInherit},
			want: swapsettings.Settings{LimitBytes: 100 << 20}},
		{name: "swap high rounds down", limit: 1 << 30, config: v1alpha1.SwapConfig{SwapHighPercent: ptr.To[int32](80)},
			want: swapsettings.Settings{LimitBytes: 1 << 30, HighBytes: ptr.To[int64](858993459)}},
		{name: "swap high of the largest limit", limit: limits.MaxSwapBytes, config: v1alpha1.SwapConfig{SwapHighPercent: ptr.To[int32](100)},
			want: swapsettings.Settings{LimitBytes: limits.MaxSwapBytes, HighBytes: ptr.To(limits.MaxSwapBytes)}},
		{name: "zswap enabled", limit: 1, config: v1alpha1.SwapConfig{Zswap: v1alpha1.ZswapEnabled},
			want: swapsettings.Settings{LimitBytes: 1, Zswap: swapsettings.ZswapOn}},
		{name: "zswap disabled", limit: 1, config: v1alpha1.SwapConfig{Zswap: v1alpha1.ZswapDisabled},
			want: swapsettings.Settings{LimitBytes: 1, Zswap: swapsettings.ZswapOff}},
		{name: "swappiness zero", limit: 1, config: v1alpha1.SwapConfig{Swappiness: ptr.To[int64](0)},
			want: swapsettings.Settings{LimitBytes: 1, Swappiness: ptr.To[uint64](0)}},
		{name: "swappiness", limit: 1, config: v1alpha1.SwapConfig{Swappiness: ptr.To[int64](100)},
			want: swapsettings.Settings{LimitBytes: 1, Swappiness: ptr.To[uint64](100)}},
		{name: "compressed only", limit: 1, config: v1alpha1.SwapConfig{Zswap: v1alpha1.ZswapCompressedOnly},
			want: swapsettings.Settings{LimitBytes: 1, ZswapWritebackOff: true}},
		{name: "offload with its budget", limit: 1, config: v1alpha1.SwapConfig{Offload: &v1alpha1.Offload{MaxStallPercent: ptr.To[v1alpha1.StallPercent](50)}},
			want: swapsettings.Settings{LimitBytes: 1, OffloadMaxStall: ptr.To[int32](50)}},
		{name: "offload with the default budget", limit: 1, config: v1alpha1.SwapConfig{Offload: &v1alpha1.Offload{}},
			want: swapsettings.Settings{LimitBytes: 1, OffloadMaxStall: ptr.To[int32](10)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := settingsFor(tc.limit, &tc.config)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("settingsFor(%d, %+v) = %+v, want %+v", tc.limit, tc.config, got, tc.want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("settingsFor(%d, %+v) = invalid settings: %v", tc.limit, tc.config, err)
			}
		})
	}
}
