package swapsettings

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
)

func ptr[T any](v T) *T { return &v }

func TestValidate(t *testing.T) {
	tests := []struct {
		name     string
		settings Settings
		wantErr  string
	}{
		{name: "zero", settings: Settings{}},
		{name: "every field", settings: Settings{LimitBytes: 100, HighBytes: ptr[int64](80), Zswap: ZswapOff, Swappiness: ptr[uint64](0)}},
		{name: "largest", settings: Settings{LimitBytes: limits.MaxSwapBytes, HighBytes: ptr(limits.MaxSwapBytes), Zswap: ZswapOn, Swappiness: ptr[uint64](MaxSwappiness)}},
		{name: "negative limit", settings: Settings{LimitBytes: -1}, wantErr: "swap limit -1 out of range 0..1125899906842624"},
		{name: "limit too large", settings: Settings{LimitBytes: limits.MaxSwapBytes + 1}, wantErr: "swap limit 1125899906842625 out of range"},
		{name: "high above limit", settings: Settings{LimitBytes: 10, HighBytes: ptr[int64](11)}, wantErr: "swap high 11 out of range 0..10"},
		{name: "negative high", settings: Settings{LimitBytes: 10, HighBytes: ptr[int64](-1)}, wantErr: "swap high -1 out of range"},
		{name: "unknown zswap", settings: Settings{Zswap: 3}, wantErr: "zswap Zswap(3) is none of"},
		{name: "swappiness", settings: Settings{Swappiness: ptr[uint64](101)}, wantErr: "swappiness 101 out of range 0..100"},
		{name: "offload and writeback", settings: Settings{LimitBytes: 1, ZswapWritebackOff: true, OffloadMaxStall: ptr[int32](MaxOffloadMaxStall)}},
		{name: "offload budget 0", settings: Settings{OffloadMaxStall: ptr[int32](0)}, wantErr: "offload max stall 0 out of range 1..10000"},
		{name: "offload budget too large", settings: Settings{OffloadMaxStall: ptr[int32](10001)}, wantErr: "offload max stall 10001 out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.settings.Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestZswapText: the hook's --zswap values and back.
func TestZswapText(t *testing.T) {
	for z, text := range map[Zswap]string{ZswapUnchanged: "", ZswapOn: "on", ZswapOff: "off"} {
		if got := z.String(); got != text {
			t.Errorf("%d.String() = %q, want %q", z, got, text)
		}
		if back, err := ParseZswap(text); err != nil || back != z {
			t.Errorf("ParseZswap(%q) = %v, %v; want %d", text, back, err, z)
		}
	}
	for _, bad := range []string{"On", "true", "max", "0", " on", "unchanged", "Zswap(3)"} {
		if z, err := ParseZswap(bad); err == nil {
			t.Errorf("ParseZswap(%q) = %d, want an error", bad, z)
		}
	}
}

// TestJSON: the form of a share's record (internal/hookstate), both ways.
func TestJSON(t *testing.T) {
	tests := []struct {
		settings Settings
		json     string
	}{
		{Settings{}, `{"swapLimit":0}`},
		{Settings{LimitBytes: 314572800}, `{"swapLimit":314572800}`},
		{Settings{LimitBytes: 100, HighBytes: ptr[int64](80), Zswap: ZswapOff, Swappiness: ptr[uint64](0)}, `{"swapLimit":100,"swapHigh":80,"zswap":false,"swappiness":0}`},
		{Settings{LimitBytes: 1, Zswap: ZswapOn}, `{"swapLimit":1,"zswap":true}`},
		{Settings{LimitBytes: 1, ZswapWritebackOff: true, OffloadMaxStall: ptr[int32](50)}, `{"swapLimit":1,"zswapWritebackOff":true,"offloadMaxStall":50}`},
	}
	for _, tc := range tests {
		data, err := json.Marshal(tc.settings)
		if err != nil || string(data) != tc.json {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tc.settings, data, err, tc.json)
		}
		var got Settings
		if err := json.Unmarshal([]byte(tc.json), &got); err != nil || !reflect.DeepEqual(got, tc.settings) {
			t.Errorf("Unmarshal(%s) = %+v, %v; want %+v", tc.json, got, err, tc.settings)
		}
	}
	var got Settings
	if err := json.Unmarshal([]byte(`{"swapLimit":1,"zswap":null}`), &got); err != nil || got != (Settings{LimitBytes: 1}) {
		t.Errorf("zswap null reads as %+v, %v; want unchanged", got, err)
	}
	for _, bad := range []string{`{"zswap":1}`, `{"zswap":"on"}`, `{"zswap":{}}`} {
		if err := json.Unmarshal([]byte(bad), &got); err == nil {
			t.Errorf("Unmarshal(%s) = %+v, want an error", bad, got)
		}
	}
	if data, err := json.Marshal(Settings{Zswap: 3}); err == nil {
		t.Errorf("Marshal of an unknown zswap value = %s, want an error", data)
	}
}

// FuzzJSON: whatever a record holds that decodes is written back in a form
// that decodes to the same settings.
func FuzzJSON(f *testing.F) {
	for _, seed := range []string{
		`{"swapLimit":104857600,"swapHigh":83886080,"zswap":false,"swappiness":0}`,
		`{"swapLimit":1,"zswap":true}`,
		`{"swapLimit":1,"zswap":null,"swapHigh":null}`,
		`{"swapLimit":1,"zswapWritebackOff":true,"offloadMaxStall":10}`,
		`{"zswap":1}`,
		`{"swapLimit":-1,"swappiness":101}`,
		`null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Settings
		if err := json.Unmarshal(data, &s); err != nil {
			return
		}
		if !s.Zswap.Valid() {
			t.Fatalf("Unmarshal(%q) = zswap %s", data, s.Zswap)
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("Marshal(%+v), read from %q: %v", s, data, err)
		}
		var back Settings
		if err := json.Unmarshal(again, &back); err != nil || !reflect.DeepEqual(back, s) {
			t.Fatalf("%q reads as %+v, written as %s, which reads as %+v (%v)", data, s, again, back, err)
		}
	})
}
