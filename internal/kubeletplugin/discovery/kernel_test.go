package discovery

import "testing"

func TestParseKernelVersion(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{in: "6.1.0-25-amd64", want: "6.1.0"},
		{in: "5.10.0", want: "5.10.0"},
		{in: "6.8", want: "6.8.0"},
		{in: "4.19.0-cloud+", want: "4.19.0"},
		{in: "6.8.0-45-generic\n", want: "6.8.0"},
		{in: "5.15.153.1-microsoft-standard-WSL2", want: "5.15.153"},
		{in: "6.10-rc1", want: "6.10.0"},
		{in: "6.6.", want: "6.6.0"},
		{in: "06.01.02", want: "6.1.2"},
		{in: "6", wantErr: true},
		{in: "6.", wantErr: true},
		{in: "6.x", wantErr: true},
		{in: "v6.1.0", wantErr: true},
		{in: "", wantErr: true},
		{in: "99999999999999999999.1", wantErr: true},
	}
	for _, tc := range tests {
		got, err := ParseKernelVersion(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseKernelVersion(%q) = %q, %v; want %q, error %t", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestKernelVersionTmpfsNoswap(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"5.15.0", false},
		{"6.1.0", false},
		{"6.3.13", false},
		{"6.4.0", true},
		{"6.8.0", true},
		{"7.0.0", true},
	}
	for _, tc := range tests {
		v, err := parseKernelVersion(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := v.hasTmpfsNoswap(); got != tc.want {
			t.Errorf("%s: hasTmpfsNoswap() = %t, want %t", tc.in, got, tc.want)
		}
	}
}
