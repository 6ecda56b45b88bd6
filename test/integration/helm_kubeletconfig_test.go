package integration

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/dra-driver-swap/dra-driver-swap/test/manifest"
)

// renderPluginDaemonSet renders the chart with args and returns the kubelet
// plugin's DaemonSet.
func renderPluginDaemonSet(t *testing.T, args ...string) *appsv1.DaemonSet {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", "dra-driver-swap", chartDir, "--namespace", "dra-swap"}, args...)...)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	objs, err := manifest.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if u.GetKind() == "DaemonSet" {
			ds := &appsv1.DaemonSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ds); err != nil {
				t.Fatal(err)
			}
			return ds
		}
	}
	t.Fatal("no DaemonSet rendered")
	return nil
}

// TestChartKubeletConfigMount: the kubelet's configuration is mounted only
// where one is given, as a hostPath of type File (a missing file stops the
// pod rather than have the runtime create a directory in its place: no
// hostPath volume of the plugin goes without a type); with path "" nothing
// is mounted and the plugin is told there is no file. The host's mount
// table, which gives a swap file's device in the pod, is mounted read-only
// as a file.
func TestChartKubeletConfigMount(t *testing.T) {
	t.Parallel()
	type mount struct {
		hostPath, mountPath string
		pathType            corev1.HostPathType
	}
	tests := []struct {
		name     string
		args     []string
		want     map[string]*mount // volume name → mount, nil: none
		wantArgs []string
	}{
		{
			name: "default: kubeadm's file",
			want: map[string]*mount{
				"kubelet-config":     {"/var/lib/kubelet/config.yaml", "/host/var/lib/kubelet/config.yaml", corev1.HostPathFile},
				"kubelet-config-dir": nil,
				"host-mountinfo":     {"/proc/1/mountinfo", "/host/proc/1/mountinfo", corev1.HostPathFile},
			},
			wantArgs: []string{"--kubelet-config=/var/lib/kubelet/config.yaml"},
		},
		{
			name: "no config file: nothing mounted",
			args: []string{"--set-string", "kubeletPlugin.kubeletConfig.path="},
			want: map[string]*mount{
				"kubelet-config":     nil,
				"kubelet-config-dir": nil,
				"host-mountinfo":     {"/proc/1/mountinfo", "/host/proc/1/mountinfo", corev1.HostPathFile},
			},
			wantArgs: []string{"--kubelet-config="},
		},
		{
			name: "k3s: drop-ins only",
			args: []string{"--set-string", "kubeletPlugin.kubeletConfig.path=", "--set", "kubeletPlugin.kubeletConfig.dropInDir=/var/lib/rancher/k3s/agent/etc/kubelet.conf.d"},
			want: map[string]*mount{
				"kubelet-config": nil,
				"kubelet-config-dir": {"/var/lib/rancher/k3s/agent/etc/kubelet.conf.d", "/host/var/lib/rancher/k3s/agent/etc/kubelet.conf.d",
					corev1.HostPathDirectory},
			},
			wantArgs: []string{"--kubelet-config=", "--kubelet-config-dir=/var/lib/rancher/k3s/agent/etc/kubelet.conf.d"},
		},
		{
			name: "EKS: file and drop-ins",
			args: []string{"--set", "kubeletPlugin.kubeletConfig.path=/etc/kubernetes/kubelet/config.json,kubeletPlugin.kubeletConfig.dropInDir=/etc/kubernetes/kubelet/config.json.d"},
			want: map[string]*mount{
				"kubelet-config": {"/etc/kubernetes/kubelet/config.json", "/host/etc/kubernetes/kubelet/config.json", corev1.HostPathFile},
				"kubelet-config-dir": {"/etc/kubernetes/kubelet/config.json.d", "/host/etc/kubernetes/kubelet/config.json.d",
					corev1.HostPathDirectory},
			},
			wantArgs: []string{"--kubelet-config=/etc/kubernetes/kubelet/config.json", "--kubelet-config-dir=/etc/kubernetes/kubelet/config.json.d"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := renderPluginDaemonSet(t, tc.args...).Spec.Template.Spec
			volumes := map[string]corev1.Volume{}
			for _, v := range spec.Volumes {
				volumes[v.Name] = v
				if v.HostPath != nil && (v.HostPath.Type == nil || *v.HostPath.Type == corev1.HostPathUnset) {
					t.Errorf("hostPath volume %s (%s) has no type: the runtime would create a directory at a missing path", v.Name, v.HostPath.Path)
				}
			}
			c := spec.Containers[0]
			for name, want := range tc.want {
				v, ok := volumes[name]
				var m *corev1.VolumeMount
				for i := range c.VolumeMounts {
					if c.VolumeMounts[i].Name == name {
						m = &c.VolumeMounts[i]
					}
				}
				if want == nil {
					if ok || m != nil {
						t.Errorf("volume %s rendered (%+v, mount %+v), want none", name, v, m)
					}
					continue
				}
				if !ok || v.HostPath == nil || m == nil {
					t.Fatalf("volume %s: %+v, mount %+v; want hostPath %s mounted at %s", name, v, m, want.hostPath, want.mountPath)
				}
				if got := v.HostPath.Type; v.HostPath.Path != want.hostPath || got == nil || *got != want.pathType {
					t.Errorf("volume %s: hostPath %s type %v, want %s type %s", name, v.HostPath.Path, got, want.hostPath, want.pathType)
				}
				if m.MountPath != want.mountPath || !m.ReadOnly {
					t.Errorf("volume %s mounted at %s read-only %v, want %s read-only", name, m.MountPath, m.ReadOnly, want.mountPath)
				}
			}
			var kubeletArgs []string
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--kubelet-config") {
					kubeletArgs = append(kubeletArgs, a)
				}
			}
			if !slices.Equal(kubeletArgs, tc.wantArgs) {
				t.Errorf("kubelet config args %q, want %q", kubeletArgs, tc.wantArgs)
			}
		})
	}

	// The schema takes "" and absolute paths, nothing else.
	if _, err := runHelm(t, "template", "dra-driver-swap", chartDir, "--set", "kubeletPlugin.kubeletConfig.path=etc/kubelet.yaml"); err == nil {
		t.Error("a relative kubeletConfig.path was accepted")
	}
}
