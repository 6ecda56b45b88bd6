package version

import (
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
)

func TestResolve(t *testing.T) {
	stamped := func(mainVersion string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/dra-driver-swap/dra-driver-swap", Version: mainVersion}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	const commit = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name         string
		ver, rev     string
		bi           *debug.BuildInfo
		wantVersion  string
		wantRevision string
	}{
		{name: "linker flags win", ver: "0.2.0", rev: "abc", bi: stamped("v9.9.9", "vcs.revision", commit),
			wantVersion: "0.2.0", wantRevision: "abc"},
		{name: "no build information", wantVersion: DefaultVersion, wantRevision: DefaultRevision},
		{name: "go test: no stamp", bi: stamped(""), wantVersion: DefaultVersion, wantRevision: DefaultRevision},
		{name: "go build in a checkout", bi: stamped("(devel)", "vcs", "git", "vcs.revision", commit, "vcs.modified", "false"),
			wantVersion: DefaultVersion, wantRevision: commit},
		{name: "go build in a changed checkout", bi: stamped("(devel)", "vcs.revision", commit, "vcs.modified", "true"),
			wantVersion: DefaultVersion, wantRevision: commit + "-dirty"},
		{name: "go install at a version", bi: stamped("v0.2.0"), wantVersion: "v0.2.0", wantRevision: DefaultRevision},
		{name: "revision from the linker, version from go", rev: "abc", bi: stamped("v0.2.0", "vcs.revision", commit),
			wantVersion: "v0.2.0", wantRevision: "abc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.ver, tc.rev, tc.bi)
			want := Info{Version: tc.wantVersion, Revision: tc.wantRevision, GoVersion: runtime.Version()}
			if got != want {
				t.Errorf("resolve(%q, %q) = %+v, want %+v", tc.ver, tc.rev, got, want)
			}
		})
	}
}

func TestGet(t *testing.T) {
	// go test links without -X and stamps no VCS information.
	if got, want := Get(), (Info{Version: DefaultVersion, Revision: DefaultRevision, GoVersion: runtime.Version()}); got != want {
		t.Errorf("Get() = %+v, want %+v", got, want)
	}
}

func TestLine(t *testing.T) {
	i := Info{Version: "0.2.0", Revision: "abc", GoVersion: "go1.26.8"}
	if got, want := i.Line("dra-swap-hook"), "dra-swap-hook 0.2.0 (revision abc, go1.26.8)"; got != want {
		t.Errorf("Line = %q, want %q", got, want)
	}
	if got, want := i.LabelValues(), []string{"0.2.0", "abc", "go1.26.8"}; !slices.Equal(got, want) {
		t.Errorf("LabelValues = %q, want %q", got, want)
	}
	if got, want := MetricLabels(), []string{"version", "revision", "goversion"}; !slices.Equal(got, want) {
		t.Errorf("MetricLabels = %q, want %q", got, want)
	}
}
