package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// TestPluginRestoresDriftedLimit: a container the hook recorded (100Mi of
// swap, cgroup v1) whose memsw something set back to its memory limit. The
// running plugin's verifier writes memory limit + 100Mi back and tells the
// pod in a SwapLimitRestored event, through the real API server.
func TestPluginRestoresDriftedLimit(t *testing.T) {
	t.Parallel()
	ctx, client, h, cfg := runPlugin(t)
	waitForSlice(t, ctx, client, "the device is published", capacityIs(2*gi))

	// No controller-manager here: the ServiceAccount admission plugin needs
	// the namespace's default ServiceAccount to exist before a pod.
	if _, err := client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "drifted"},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "worker", Image: "registry.example/worker"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const (
		id    = "0123456789abcdef0123456789abcdef"
		group = "/kubepods/burstable/pod1/" + id
		claim = "aaaaaaaa-0000-4000-8000-000000000001"
	)
	memDir := "sys/fs/cgroup/memory" + group
	h.write(memDir+"/memory.limit_in_bytes", "134217728\n")
	h.write(memDir+"/memory.memsw.limit_in_bytes", "134217728\n")
	dir := filepath.Join(cfg.HookStateDir, id)
	if err := hookstate.Record(dir, hookstate.ShareKey(claim, 0), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 100 << 20}}); err != nil {
		t.Fatal(err)
	}
	if err := hookstate.WriteContainer(dir, hookstate.Container{ID: id, CgroupVersion: 1, CgroupGroup: group,
		Namespace: "default", Pod: pod.Name, PodUID: string(pod.UID), Name: "worker"}); err != nil {
		t.Fatal(err)
	}

	memsw := filepath.Join(h.root, memDir, "memory.memsw.limit_in_bytes")
	var got string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(memsw)
		got = strings.TrimSpace(string(data))
		return err == nil && got == "239075328", nil
	})
	if err != nil {
		t.Fatalf("memory.memsw.limit_in_bytes = %s, want 239075328 (128Mi + 100Mi) restored", got)
	}
	var notes []string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		notes = notes[:0]
		for _, e := range list.Items {
			notes = append(notes, e.Reason+": "+e.Note)
			if e.Reason == "SwapLimitRestored" && e.Type == corev1.EventTypeWarning && e.Regarding.UID == pod.UID &&
				strings.Contains(e.Note, "was 0 instead of 100Mi") && strings.Contains(e.Note, `"worker"`) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no SwapLimitRestored event on the pod; events: %q", notes)
	}
}
