package integration

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/test/manifest"
)

// TestChartPluginMounts checks that the kubelet plugin mounts a host path
// writable only where it writes: its socket and checkpoint, the kubelet's
// registration, the CDI specs, the hook's records, the hook binary, and
// /sys/fs/cgroup (the verifier, always on, writes back the swap limit
// files of recorded containers and pod cgroups). Everything else is read
// only, recursively (kubeletPlugin.recursiveReadOnly, Enabled by default:
// the e2e TestPluginMountsReadOnly checks the mounts the container gets),
// the NRI socket's directory included (connecting to a socket needs no
// write access to its mount). No host path exists only on some kernels:
// /proc/pressure, absent where PSI is off at boot, is not mounted (the
// plugin reads /proc/pressure/memory in its own procfs), so the pod
// starts on every node.
func TestChartPluginMounts(t *testing.T) {
	t.Parallel()
	writable := []string{"plugin-data", "plugins-registry", "cdi", "hook-state", "hook-bin", "cgroup"}
	for name, values := range map[string][]string{
		"default":    nil,
		"custom":     {"--values", "testdata/values-custom.yaml"},
		"no-nri":     {"--set", "kubeletPlugin.nri.enabled=false,kubeletPlugin.pressure.psi=false"},
		"IfPossible": {"--set", "kubeletPlugin.recursiveReadOnly=IfPossible"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := runHelm(t, append([]string{"template", "dra-driver-swap", chartDir, "--namespace", "dra-swap"}, values...)...)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			objs, err := manifest.Decode(out)
			if err != nil {
				t.Fatal(err)
			}
			var ds *appsv1.DaemonSet
			for _, u := range objs {
				if u.GetKind() == "DaemonSet" {
					ds = &appsv1.DaemonSet{}
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ds); err != nil {
						t.Fatal(err)
					}
				}
			}
			if ds == nil {
				t.Fatal("no DaemonSet rendered")
			}
			hostPaths := map[string]bool{}
			for _, v := range ds.Spec.Template.Spec.Volumes {
				hostPaths[v.Name] = v.HostPath != nil
				if v.HostPath != nil && (v.HostPath.Path == "/proc/pressure" || strings.HasPrefix(v.HostPath.Path, "/proc/pressure/")) {
					t.Errorf("host path volume %s mounts %s, which does not exist where PSI is off at boot: the pod would not start there", v.Name, v.HostPath.Path)
				}
			}
			wantRRO := corev1.RecursiveReadOnlyEnabled
			if name == "IfPossible" {
				wantRRO = corev1.RecursiveReadOnlyIfPossible
			}
			var rw []string
			for _, c := range ds.Spec.Template.Spec.Containers {
				if !slices.Contains(c.Args, "--node-pressure-file=/proc/pressure/memory") {
					t.Errorf("container %s args %q lack --node-pressure-file=/proc/pressure/memory", c.Name, c.Args)
				}
				for _, m := range c.VolumeMounts {
					if !hostPaths[m.Name] {
						continue
					}
					if !m.ReadOnly {
						rw = append(rw, m.Name)
						if !slices.Contains(writable, m.Name) {
							t.Errorf("container %s mounts host path volume %s (%s) writable", c.Name, m.Name, m.MountPath)
						}
						continue
					}
					if got := ptr.Deref(m.RecursiveReadOnly, ""); got != wantRRO {
						t.Errorf("container %s mounts host path volume %s (%s) read-only with recursiveReadOnly %q, want %q", c.Name, m.Name, m.MountPath, got, wantRRO)
					}
				}
			}
			if !slices.Contains(rw, "cgroup") {
				t.Errorf("/sys/fs/cgroup is read-only: the verifier cannot restore limits (writable: %v)", rw)
			}
		})
	}
}
