package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    *SwapConfig
		wantErr string
	}{
		{
			name: "empty object gets defaults",
			raw:  `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig"}`,
			want: &SwapConfig{Zswap: ZswapInherit},
		},
		{
			name: "all fields",
			raw:  `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":80,"zswap":"Disabled","swappiness":10}`,
			want: &SwapConfig{SwapHighPercent: ptr.To[int32](80), Zswap: ZswapDisabled, Swappiness: ptr.To[int64](10)},
		},
		{name: "empty input", raw: ``, wantErr: "empty parameters"},
		{name: "not json", raw: `swap: 1`, wantErr: "decode dra.swap/v1alpha1 SwapConfig"},
		{name: "unknown field", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapLimit":"1Gi"}`, wantErr: `unknown field "swapLimit"`},
		{name: "duplicate field", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":1,"swappiness":2}`, wantErr: `duplicate field "swappiness"`},
		{name: "wrong kind", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"GpuConfig"}`, wantErr: "GpuConfig"},
		{name: "wrong version", raw: `{"apiVersion":"dra.swap/v2","kind":"SwapConfig"}`, wantErr: "dra.swap/v2"},
		{name: "missing kind", raw: `{"apiVersion":"dra.swap/v1alpha1"}`, wantErr: "'Kind' is missing"},
		{name: "swapHighPercent 0", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":0}`, wantErr: "swapHighPercent: Invalid value: 0: must be between 1 and 100"},
		{name: "swapHighPercent 101", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":101}`, wantErr: "swapHighPercent"},
		{name: "swapHighPercent string", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":"80"}`, wantErr: "swapHighPercent"},
		{name: "zswap bad", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","zswap":"maybe"}`, wantErr: `zswap: Unsupported value: "maybe"`},
		{name: "swappiness negative", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":-1}`, wantErr: "swappiness: Invalid value: -1"},
		{name: "swappiness 200", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":200}`, wantErr: "swappiness"},
		{
			name: "offload and compressed-only",
			raw:  `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","zswap":"CompressedOnly","offload":{"maxStallPercent":0.5}}`,
			want: &SwapConfig{Zswap: ZswapCompressedOnly, Offload: &Offload{MaxStallPercent: ptr.To[StallPercent](50)}},
		},
		{
			name: "offload's budget as a string, two decimals",
			raw:  `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":"0.25"}}`,
			want: &SwapConfig{Zswap: ZswapInherit, Offload: &Offload{MaxStallPercent: ptr.To[StallPercent](25)}},
		},
		{
			name: "offload without a budget is not defaulted here (Merge does it)",
			raw:  `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{}}`,
			want: &SwapConfig{Zswap: ZswapInherit, Offload: &Offload{}},
		},
		{name: "offload budget 0", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":0}}`, wantErr: "offload.maxStallPercent: Invalid value: \"0\": must be between 0.01 and 100"},
		{name: "offload budget above 100", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":100.01}}`, wantErr: "offload.maxStallPercent: Invalid value: \"100.01\""},
		{name: "offload budget with three decimals", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":0.005}}`, wantErr: `maxStallPercent: "0.005" has more than two decimal places`},
		{name: "offload budget negative", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":-1}}`, wantErr: `maxStallPercent: "-1" is not a percentage`},
		{name: "offload budget with an exponent", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":1e-1}}`, wantErr: `maxStallPercent: "1e-1" is not a percentage`},
		{name: "offload budget huge", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":99999999999}}`, wantErr: `maxStallPercent: "99999999999" is not a percentage`},
		{name: "offload unknown field", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStall":1}}`, wantErr: `unknown field "offload.maxStall"`},
		{name: "offload not an object", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":true}`, wantErr: "offload"},
		{name: "two errors at once", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":200,"swapHighPercent":0}`, wantErr: "swapHighPercent"},
	}
	d := NewDecoder()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := d.Decode([]byte(tc.raw))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Decode error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			got.TypeMeta = tc.want.TypeMeta
			if !equal(got, tc.want) {
				t.Fatalf("Decode = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func equal(a, b *SwapConfig) bool {
	if (a.Offload == nil) != (b.Offload == nil) || a.Offload != nil && !ptr.Equal(a.Offload.MaxStallPercent, b.Offload.MaxStallPercent) {
		return false
	}
	return ptr.Equal(a.SwapHighPercent, b.SwapHighPercent) && a.Zswap == b.Zswap && ptr.Equal(a.Swappiness, b.Swappiness)
}

func TestValidateForCgroupVersion(t *testing.T) {
	tests := []struct {
		name    string
		config  SwapConfig
		version int
		wantErr []string
	}{
		{name: "v2 knobs on v2", config: SwapConfig{SwapHighPercent: ptr.To[int32](50), Zswap: ZswapEnabled}, version: 2},
		{name: "v1 knob on v1", config: SwapConfig{Swappiness: ptr.To[int64](0), Zswap: ZswapInherit}, version: 1},
		{name: "swappiness on v2", config: SwapConfig{Swappiness: ptr.To[int64](0)}, version: 2, wantErr: []string{"swappiness: Forbidden"}},
		{name: "v2 knobs on v1", config: SwapConfig{SwapHighPercent: ptr.To[int32](50), Zswap: ZswapDisabled}, version: 1, wantErr: []string{"swapHighPercent: Forbidden", "zswap: Forbidden"}},
		{name: "unknown version", config: SwapConfig{}, version: 0, wantErr: []string{"unknown cgroup version 0"}},
		{name: "offload and compressed-only on v2", config: SwapConfig{Zswap: ZswapCompressedOnly, Offload: &Offload{}}, version: 2},
		{name: "offload and compressed-only on v1", config: SwapConfig{Zswap: ZswapCompressedOnly, Offload: &Offload{}}, version: 1,
			wantErr: []string{"zswap: Forbidden: CompressedOnly needs memory.zswap.writeback, which exists only on cgroup v2",
				"offload: Forbidden: offload needs cgroup v2 (memory.reclaim and memory.pressure); this node uses cgroup v1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.config.ValidateForCgroupVersion(tc.version)
			if len(errs) != len(tc.wantErr) {
				t.Fatalf("got %v, want %d errors %v", errs, len(tc.wantErr), tc.wantErr)
			}
			for i, want := range tc.wantErr {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i], want)
				}
			}
		})
	}
}

// TestValidateForNode: a feature the node lacks is refused with the
// node's reason, after the cgroup version's own refusals.
func TestValidateForNode(t *testing.T) {
	both := SwapConfig{Zswap: ZswapCompressedOnly, Offload: &Offload{}}
	tests := []struct {
		name    string
		config  SwapConfig
		node    NodeSupport
		wantErr []string
	}{
		{name: "capable v2 node", config: both, node: NodeSupport{CgroupVersion: 2}},
		{name: "no feature asked", config: SwapConfig{Zswap: ZswapDisabled}, node: NodeSupport{CgroupVersion: 2, Offload: "a", CompressedOnly: "b"}},
		{name: "v2 node without them", config: both, node: NodeSupport{CgroupVersion: 2, Offload: "the kernel has no memory.reclaim", CompressedOnly: "zswap is disabled"},
			wantErr: []string{"offload: Forbidden: this node cannot offload: the kernel has no memory.reclaim",
				"zswap: Forbidden: this node cannot keep pages compressed only: zswap is disabled"}},
		{name: "v1 node: the cgroup version's reasons only", config: both, node: NodeSupport{CgroupVersion: 1, Offload: "x", CompressedOnly: "y"},
			wantErr: []string{"zswap: Forbidden: CompressedOnly needs memory.zswap.writeback", "offload: Forbidden: offload needs cgroup v2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.config.ValidateForNode(tc.node)
			if len(errs) != len(tc.wantErr) {
				t.Fatalf("got %v, want %d errors %v", errs, len(tc.wantErr), tc.wantErr)
			}
			for i, want := range tc.wantErr {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i], want)
				}
			}
		})
	}
}

// TestMergeOffload: offload's fields merge one by one, and the config in
// effect carries the budget's default.
func TestMergeOffload(t *testing.T) {
	class := &SwapConfig{Offload: &Offload{MaxStallPercent: ptr.To[StallPercent](50)}}
	tests := []struct {
		name    string
		configs []*SwapConfig
		want    *Offload
	}{
		{name: "none", configs: []*SwapConfig{{Zswap: ZswapInherit}}},
		{name: "the class's", configs: []*SwapConfig{class, {}}, want: &Offload{MaxStallPercent: ptr.To[StallPercent](50)}},
		{name: "the claim's empty offload keeps the class's budget", configs: []*SwapConfig{class, {Offload: &Offload{}}}, want: &Offload{MaxStallPercent: ptr.To[StallPercent](50)}},
		{name: "the claim's budget wins", configs: []*SwapConfig{class, {Offload: &Offload{MaxStallPercent: ptr.To[StallPercent](5)}}}, want: &Offload{MaxStallPercent: ptr.To[StallPercent](5)}},
		{name: "default", configs: []*SwapConfig{{Offload: &Offload{}}}, want: &Offload{MaxStallPercent: ptr.To(DefaultMaxStall)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Merge(tc.configs...)
			if (got.Offload == nil) != (tc.want == nil) || got.Offload != nil && !ptr.Equal(got.Offload.MaxStallPercent, tc.want.MaxStallPercent) {
				t.Fatalf("Merge offload = %+v, want %+v", got.Offload, tc.want)
			}
		})
	}
	got := Merge(class)
	*got.Offload.MaxStallPercent = 1
	if *class.Offload.MaxStallPercent != 50 {
		t.Errorf("Merge aliased its input's offload")
	}
}

// TestStallPercentJSON: the percentage's forms both ways.
func TestStallPercentJSON(t *testing.T) {
	for text, want := range map[string]StallPercent{`0.5`: 50, `"0.5"`: 50, `2`: 200, `0.25`: 25, `100`: 10000, `0.01`: 1, `0.50`: 50, "\t1.0\n": 100, `0`: 0} {
		var got StallPercent
		if err := got.UnmarshalJSON([]byte(text)); err != nil || got != want {
			t.Errorf("UnmarshalJSON(%s) = %d, %v; want %d", text, got, err, want)
		}
	}
	for p, want := range map[StallPercent]string{50: "0.5", 200: "2", 25: "0.25", 10000: "100", 1: "0.01", 10: "0.1", 0: "0"} {
		data, err := p.MarshalJSON()
		if err != nil || string(data) != want {
			t.Errorf("MarshalJSON(%d) = %s, %v; want %s", p, data, err, want)
		}
		var back StallPercent
		if err := back.UnmarshalJSON(data); err != nil || back != p {
			t.Errorf("%d written as %s reads as %d, %v", p, data, back, err)
		}
	}
	for _, bad := range []string{`""`, `"."`, `".5"`, `"5."`, `"0,5"`, `"+1"`, `-0.5`, `1e2`, `0.001`, `"abc"`, `true`, `null`, `1234567`} {
		var got StallPercent
		if err := got.UnmarshalJSON([]byte(bad)); err == nil {
			t.Errorf("UnmarshalJSON(%s) = %d, want an error", bad, got)
		}
	}
	if got := StallPercent(10).PartsPerMillion(); got != 1000 {
		t.Errorf("0.1 %% = %d ppm, want 1000", got)
	}
}

func TestMerge(t *testing.T) {
	class := &SwapConfig{SwapHighPercent: ptr.To[int32](90), Zswap: ZswapDisabled}
	claim := &SwapConfig{SwapHighPercent: ptr.To[int32](50), Zswap: ZswapInherit, Swappiness: ptr.To[int64](5)}
	got := Merge(class, nil, claim)
	want := &SwapConfig{SwapHighPercent: ptr.To[int32](50), Zswap: ZswapDisabled, Swappiness: ptr.To[int64](5)}
	if !equal(got, want) {
		t.Fatalf("Merge = %+v, want %+v", got, want)
	}
	if got.APIVersion != "dra.swap/v1alpha1" || got.Kind != "SwapConfig" {
		t.Errorf("Merge type meta = %v", got.TypeMeta)
	}
	// The inputs are not aliased.
	*got.SwapHighPercent = 1
	if *claim.SwapHighPercent != 50 {
		t.Errorf("Merge aliased its input")
	}
	if empty := Merge(); empty.Zswap != ZswapInherit || empty.SwapHighPercent != nil {
		t.Errorf("Merge() = %+v, want defaults", empty)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":80,"zswap":"Disabled","swappiness":10}`))
	f.Add([]byte(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":1e400}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Add([]byte(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","zswap":"CompressedOnly","offload":{"maxStallPercent":"0.25"}}`))
	d := NewDecoder()
	f.Fuzz(func(t *testing.T, raw []byte) {
		config, err := d.Decode(raw)
		if err != nil {
			return
		}
		// Whatever decodes must be valid.
		if errs := config.Validate(); len(errs) > 0 {
			t.Fatalf("Decode accepted an invalid config %+v: %v", config, errs)
		}
	})
}

func TestDecodeField(t *testing.T) {
	path := field.NewPath("spec", "devices", "config").Index(1).Child("opaque", "parameters")
	tests := []struct {
		name string
		raw  string
		want string
	}{
		{name: "valid", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":80}`},
		{name: "empty", raw: ``, want: "spec.devices.config[1].opaque.parameters: Required value"},
		{name: "unknown field", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","labelAllowlist":["a"]}`, want: `spec.devices.config[1].opaque.parameters: Invalid value: decode dra.swap/v1alpha1 SwapConfig: strict decoding error: unknown field "labelAllowlist"`},
		{name: "out of range", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":150}`, want: "spec.devices.config[1].opaque.parameters.swapHighPercent: Invalid value: 150"},
		{name: "wrong kind", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"Other"}`, want: "spec.devices.config[1].opaque.parameters: Invalid value"},
		{name: "offload budget out of range", raw: `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":150}}`,
			want: `spec.devices.config[1].opaque.parameters.offload.maxStallPercent: Invalid value: "150": must be between 0.01 and 100 (percent of wall time)`},
	}
	d := NewDecoder()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, errs := d.DecodeField([]byte(tc.raw), path)
			if tc.want == "" {
				if len(errs) > 0 || c == nil {
					t.Fatalf("DecodeField = %v, %v", c, errs)
				}
				return
			}
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Fatalf("DecodeField errors = %v, want %q", errs, tc.want)
			}
		})
	}
}
