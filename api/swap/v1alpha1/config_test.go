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
