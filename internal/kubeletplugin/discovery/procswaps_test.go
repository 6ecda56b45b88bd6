package discovery

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseProcSwaps(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []SwapDevice
		wantErr string
	}{
		{
			name: "several devices",
			in: procSwapsHeader +
				"/dev/sda2                               partition\t8388604\t\t1024\t\t-2\n" +
				"/swapfile                               file\t\t1048576\t\t0\t\t-3\n" +
				"/dev/zram0                              partition\t4194300\t\t0\t\t100\n",
			want: []SwapDevice{
				{Path: "/dev/sda2", Type: "partition", SizeBytes: 8388604 * 1024, UsedBytes: 1024 * 1024, Priority: -2},
				{Path: "/swapfile", Type: "file", SizeBytes: 1048576 * 1024, UsedBytes: 0, Priority: -3},
				{Path: "/dev/zram0", Type: "partition", SizeBytes: 4194300 * 1024, UsedBytes: 0, Priority: 100},
			},
		},
		{name: "header only", in: procSwapsHeader},
		{name: "empty", in: ""},
		{
			name: "no trailing newline and blank lines",
			in:   procSwapsHeader + "\n/swapfile file 4 0 -2",
			want: []SwapDevice{{Path: "/swapfile", Type: "file", SizeBytes: 4096, Priority: -2}},
		},
		{
			name: "escaped path",
			in:   procSwapsHeader + `/var/my\040swap\011file\134x file 8 4 -2` + "\n",
			want: []SwapDevice{{Path: "/var/my swap\tfile\\x", Type: "file", SizeBytes: 8192, UsedBytes: 4096, Priority: -2}},
		},
		{
			name: "backslash without a valid escape is kept",
			in:   procSwapsHeader + `/a\9b\04\400 file 1 0 -2` + "\n",
			want: []SwapDevice{{Path: `/a\9b\04\400`, Type: "file", SizeBytes: 1024, Priority: -2}},
		},
		{
			name: "negative priorities",
			in:   procSwapsHeader + "/dev/vdb partition 100 0 -2\n/dev/vdc partition 100 0 -10\n",
			want: []SwapDevice{
				{Path: "/dev/vdb", Type: "partition", SizeBytes: 102400, Priority: -2},
				{Path: "/dev/vdc", Type: "partition", SizeBytes: 102400, Priority: -10},
			},
		},
		{name: "too few fields", in: procSwapsHeader + "/dev/sda2 partition 8388604 0\n", wantErr: `line 2 "/dev/sda2 partition 8388604 0": want 5 fields`},
		{name: "too many fields", in: procSwapsHeader + "/dev/sda 2 partition 8 0 -2\n", wantErr: `line 2 "/dev/sda 2 partition 8 0 -2"`},
		{name: "non-numeric size", in: procSwapsHeader + "/dev/sda2 partition 8G 0 -2\n", wantErr: `line 2 "/dev/sda2 partition 8G 0 -2": size`},
		{name: "non-numeric used", in: procSwapsHeader + "/dev/sda2 partition 8 x -2\n", wantErr: "used"},
		{name: "non-numeric priority", in: procSwapsHeader + "/dev/sda2 partition 8 0 high\n", wantErr: "priority"},
		{name: "negative size", in: procSwapsHeader + "/dev/sda2 partition -8 0 -2\n", wantErr: "negative size"},
		{name: "size overflows bytes", in: procSwapsHeader + "/dev/sda2 partition 9223372036854775807 0 -2\n", wantErr: "overflows"},
		{name: "malformed line after a good one", in: procSwapsHeader + "/dev/vdb partition 100 0 -2\ngarbage\n", wantErr: `line 3 "garbage"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProcSwaps(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseProcSwaps() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseProcSwaps() error = %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseProcSwaps() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func FuzzParseProcSwaps(f *testing.F) {
	for _, seed := range []string{
		"",
		procSwapsHeader,
		procSwapsHeader + "/dev/sda2 partition 8388604 0 -2\n",
		procSwapsHeader + `/var/a\040b file 1024 12 -3` + "\n/dev/zram0 partition 4 0 100\n",
		procSwapsHeader + "/dev/sda2 partition x 0 -2\n",
		"/x file 1 1 1\r\n\\\\\\0",
		`\377\400\\ file 9223372036854775807 0 -9223372036854775808`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		devices, err := ParseProcSwaps(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, d := range devices {
			if d.SizeBytes < 0 || d.UsedBytes < 0 || d.SizeBytes%1024 != 0 || d.UsedBytes%1024 != 0 {
				t.Errorf("device %+v: sizes must be non-negative multiples of 1024", d)
			}
			if d.Path == "" || d.Type == "" {
				t.Errorf("device %+v: empty path or type", d)
			}
		}
	})
}
