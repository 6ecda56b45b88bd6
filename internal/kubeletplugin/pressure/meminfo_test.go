package pressure

import (
	"bytes"
	"strings"
	"testing"
)

// meminfoSample is a trimmed /proc/meminfo of a node with 8 GiB of swap,
// 1.5 GiB of it in use.
const meminfoSample = `MemTotal:       16303740 kB
MemFree:          271144 kB
MemAvailable:    1893288 kB
SwapCached:        65536 kB
SwapTotal:       8388604 kB
SwapFree:        6815740 kB
Zswap:                 0 kB
Zswapped:              0 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
`

func TestParseMeminfo(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantTotal int64
		wantUsed  int64
		wantErr   string // substring of the error; "" means success
	}{
		{name: "swap in use", in: meminfoSample, wantTotal: 8388604 * 1024, wantUsed: (8388604 - 6815740) * 1024},
		{name: "no swap", in: "MemTotal: 1 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n"},
		{name: "full", in: "SwapFree: 0 kB\nSwapTotal: 4 kB", wantTotal: 4096, wantUsed: 4096},
		{
			name:      "largest representable",
			in:        "SwapTotal: 9007199254740991 kB\nSwapFree: 0 kB\n",
			wantTotal: 9007199254740991 * 1024, wantUsed: 9007199254740991 * 1024,
		},
		{name: "empty", in: "", wantErr: `missing "SwapTotal:" line`},
		{name: "missing SwapFree", in: "SwapTotal: 4 kB\n", wantErr: `missing "SwapFree:" line`},
		{name: "SwapCached is not SwapTotal", in: "SwapCached: 4 kB\nSwapFree: 4 kB\n", wantErr: `missing "SwapTotal:" line`},
		{name: "no unit", in: "SwapTotal: 4\nSwapFree: 4 kB\n", wantErr: `line 1 "SwapTotal: 4": want "<number> kB"`},
		{name: "wrong unit", in: "SwapTotal: 4 MB\nSwapFree: 4 kB\n", wantErr: "line 1 "},
		{name: "extra field", in: "SwapTotal: 4 kB\nSwapFree: 4 kB x\n", wantErr: "line 2 "},
		{name: "not a number", in: "SwapTotal: four kB\nSwapFree: 4 kB\n", wantErr: "line 1 "},
		{name: "negative", in: "SwapTotal: 4 kB\nSwapFree: -4 kB\n", wantErr: "line 2 "},
		{name: "overflow", in: "SwapTotal: 9007199254740992 kB\nSwapFree: 0 kB\n", wantErr: "overflows int64"},
		{name: "free above total", in: "SwapTotal: 4 kB\nSwapFree: 8 kB\n", wantErr: "SwapFree (8192 bytes) exceeds SwapTotal (4096 bytes)"},
		{name: "repeated", in: "SwapTotal: 4 kB\nSwapTotal: 4 kB\nSwapFree: 4 kB\n", wantErr: "line 2 \"SwapTotal: 4 kB\": repeated \"SwapTotal:\" line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			total, used, err := ParseMeminfo(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseMeminfo() = %d, %d, %v; want error containing %q", total, used, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseMeminfo() error = %v", err)
			}
			if total != tt.wantTotal || used != tt.wantUsed {
				t.Errorf("ParseMeminfo() = total %d, used %d; want %d, %d", total, used, tt.wantTotal, tt.wantUsed)
			}
		})
	}
}

func FuzzParseMeminfo(f *testing.F) {
	for _, seed := range []string{
		meminfoSample,
		"SwapTotal: 0 kB\nSwapFree: 0 kB\n",
		"SwapTotal: 9007199254740991 kB\nSwapFree: 1 kB\n",
		"SwapTotal: 4 kB\nSwapFree: 8 kB\n",
		"SwapTotal: -4 kB\nSwapFree: -8 kB\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzInput {
			return // see maxFuzzInput
		}
		total, used, err := ParseMeminfo(bytes.NewReader(data))
		if err != nil {
			return
		}
		if total < 0 || used < 0 || used > total {
			t.Fatalf("ParseMeminfo(%q) = total %d, used %d; want 0 <= used <= total", data, total, used)
		}
		if total > 0 {
			if v := swapValue(usedPercent(total, used)); !validTaintValue(v) {
				t.Fatalf("ParseMeminfo(%q) gives invalid taint value %q", data, v)
			}
		}
	})
}
