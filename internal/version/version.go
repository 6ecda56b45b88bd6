// Package version is what every dra.swap binary says about its build: the
// release version and VCS revision the build stamps with -ldflags -X, and
// the Go toolchain that compiled it. It imports the standard library only,
// so that the OCI hook may link it.
//
// The Makefile, tools/images and hack/cluster/build.sh link with
//
//	-X github.com/dra-driver-swap/dra-driver-swap/internal/version.version=0.2.0
//	-X github.com/dra-driver-swap/dra-driver-swap/internal/version.revision=<commit>
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and revision are set by the linker (-X) and never assigned at
// run time.
var (
	version  string
	revision string
)

const (
	// DefaultVersion is the version of a binary built without one.
	DefaultVersion = "devel"
	// DefaultRevision is the revision of a binary built without one and
	// without a VCS stamp.
	DefaultRevision = "unknown"

	// MetricName is the build information gauge both components export,
	// always 1, with the labels of MetricLabels.
	MetricName = "dra_swap_build_info"
	// MetricHelp is its help text.
	MetricHelp = "Always 1; its labels say which build of dra.swap runs: version, revision (VCS commit) and goversion."
)

// MetricLabels are the build information gauge's label names, in the
// order of Info.LabelValues.
func MetricLabels() []string { return []string{"version", "revision", "goversion"} }

// Info is a binary's build.
type Info struct {
	// Version is the release (0.2.0), DefaultVersion when the build set
	// none, or the module version go install stamped.
	Version string
	// Revision is the VCS commit: the one the build set, else the one Go
	// stamped (with -dirty when the tree had changes), else
	// DefaultRevision.
	Revision string
	// GoVersion is the Go toolchain's version, such as go1.26.8.
	GoVersion string
}

// Get returns this binary's build.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, revision, bi)
}

// resolve fills what the linker did not set from the build information
// Go embeds (bi may be nil).
func resolve(ver, rev string, bi *debug.BuildInfo) Info {
	info := Info{Version: ver, Revision: rev, GoVersion: runtime.Version()}
	if info.Version == "" {
		info.Version = DefaultVersion
		// go install module@vX.Y.Z stamps the module's version; a build
		// in a checkout stamps a pseudo-version or "(devel)".
		if bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
	}
	if info.Revision == "" {
		info.Revision = DefaultRevision
		if bi != nil {
			settings := map[string]string{}
			for _, s := range bi.Settings {
				settings[s.Key] = s.Value
			}
			if r := settings["vcs.revision"]; r != "" {
				info.Revision = r
				if settings["vcs.modified"] == "true" {
					info.Revision += "-dirty"
				}
			}
		}
	}
	return info
}

// String is what --version prints after the program's name:
// "0.2.0 (revision 0123abc…, go1.26.8)".
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}

// Line is the --version output of program, without the newline:
// "dra-swap-hook 0.2.0 (revision 0123abc…, go1.26.8)".
func (i Info) Line(program string) string { return program + " " + i.String() }

// LabelValues are the build information gauge's label values, in the order
// of MetricLabels.
func (i Info) LabelValues() []string { return []string{i.Version, i.Revision, i.GoVersion} }
