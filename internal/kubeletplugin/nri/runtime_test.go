package nri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/limitcheck"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/testprocess"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

type fakeVerifier struct {
	mu     sync.Mutex
	checks []string
	all    []string
	pods   []string
}

func (f *fakeVerifier) Check(_ context.Context, id, trigger string) (limitcheck.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checks = append(f.checks, id+"/"+trigger)
	return limitcheck.Held, nil
}

func (f *fakeVerifier) CheckAll(_ context.Context, trigger string, _ time.Duration) (limitcheck.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.all = append(f.all, trigger)
	return limitcheck.Summary{}, nil
}

func (f *fakeVerifier) CheckPods(_ context.Context, podUIDs []string, trigger string) (limitcheck.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, uid := range podUIDs {
		f.pods = append(f.pods, uid+"/"+trigger)
	}
	return limitcheck.Summary{}, nil
}

// podChecks is how many times the pod was checked.
func (f *fakeVerifier) podChecks(podUID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.pods {
		if p == podUID+"/"+PodUpdateTrigger {
			n++
		}
	}
	return n
}

func (f *fakeVerifier) seen() ([]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.checks...), append([]string(nil), f.all...)
}

// transitions records what the plugin tells its Observer.
type transitions struct {
	mu  sync.Mutex
	got []bool
}

func (o *transitions) NRIConnected(connected bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, connected)
}

func (o *transitions) seen() []bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

// TestWithTheRuntimeSide runs the plugin against NRI's own runtime side
// (the package containerd embeds) over a real socket: it registers, is
// synchronized, adjusts a new container, corrects an update and verifies
// after it; a second instance waits for the first's lock and registers
// once it stops. (A runtime restart, which closes the connection, is an e2e
// scenario: the in-process runtime side does not close its plugins'
// connections when stopped.)
func TestWithTheRuntimeSide(t *testing.T) {
	dir, err := os.MkdirTemp("", "nri") // a socket path must be short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "nri.sock")
	stateDir := filepath.Join(dir, "hook")
	ctrDir := filepath.Join(stateDir, "ctr")
	if err := hookstate.WriteContainer(ctrDir, hookstate.Container{ID: "ctr", CgroupVersion: 2, CgroupGroup: "/kubepods/pod1/ctr"}); err != nil {
		t.Fatal(err)
	}
	if err := hookstate.Record(ctrDir, hookstate.ShareKey(uidA, 0), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 100 * mi}}); err != nil {
		t.Fatal(err)
	}

	startRuntime := func() *adaptation.Adaptation {
		t.Helper()
		sync := func(ctx context.Context, cb adaptation.SyncCB) error {
			_, err := cb(ctx, nil, nil)
			return err
		}
		update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
			return nil, nil
		}
		r, err := adaptation.New("test-runtime", "v0", sync, update,
			adaptation.WithSocketPath(socket), adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
			adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	runtime := startRuntime()

	ver := &fakeVerifier{}
	lock := filepath.Join(dir, "nri.lock")
	observer := &transitions{}
	p := &Plugin{SocketPath: socket, HookPath: hookPath, StateDir: stateDir, CgroupVersion: 2, Verifier: ver, Retry: 50 * time.Millisecond, LockPath: lock, Observer: observer,
		PodWatchInterval: 10 * time.Millisecond, PodWatchWindow: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
		runtime.Stop()
	})

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting until %s: %v (status %q)", what, err, p.Status())
		}
	}
	waitFor("the plugin is registered and synchronized", func() bool { _, all := ver.seen(); return p.Connected() && len(all) == 1 })

	pod := &api.PodSandbox{Id: "pod1", Name: "p", Namespace: "ns", Uid: "cccccccc-0000-4000-8000-000000000003"}
	created, err := runtime.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: container(128*mi, applyHook(uidA, "104857600"))})
	if err != nil {
		t.Fatal(err)
	}
	if got := created.GetAdjust().GetLinux().GetResources().GetUnified()["memory.swap.max"]; got != "104857600" {
		t.Errorf("create: memory.swap.max in the adjusted spec %q, want 104857600", got)
	}

	// The kubelet's resize update carries its own swap value (0 under
	// NoSwap); the plugin replaces it and keeps the new memory limit.
	ctr := container(192*mi, applyHook(uidA, "104857600"))
	ctr.State = api.ContainerState_CONTAINER_RUNNING
	updated, err := runtime.UpdateContainer(ctx, &api.UpdateContainerRequest{Pod: pod, Container: ctr, LinuxResources: &api.LinuxResources{
		Memory:  &api.LinuxMemory{Limit: api.Int64(192 * mi)},
		Unified: map[string]string{"memory.swap.max": "0"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var own *api.ContainerUpdate
	for _, u := range updated.GetUpdate() {
		if u.GetContainerId() == "ctr" {
			own = u
		}
	}
	res := own.GetLinux().GetResources()
	if got := res.GetUnified()["memory.swap.max"]; got != "104857600" {
		t.Errorf("update: memory.swap.max %q, want 104857600 (updates %v)", got, updated.GetUpdate())
	}
	if l := res.GetMemory().GetLimit(); l == nil || l.GetValue() != 192*mi {
		t.Errorf("update: the memory limit of the resize was lost: %v", res.GetMemory())
	}
	if err := runtime.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: pod, Container: ctr}); err != nil {
		t.Fatal(err)
	}
	waitFor("the container is verified after the update", func() bool { checks, _ := ver.seen(); return len(checks) == 1 && checks[0] == "ctr/update" })
	// The kubelet's update of the pod's own cgroup follows a decrease of
	// its containers (and resets the pod's budget under systemd): the pod
	// is watched after PostUpdateContainer, and after the pod sandbox
	// events where the runtime sends them.
	waitFor("the pod is watched after the container update", func() bool { return ver.podChecks(pod.Uid) >= 2 })
	waitFor("the pod's watch ends", func() bool {
		n := ver.podChecks(pod.Uid)
		time.Sleep(50 * time.Millisecond)
		return ver.podChecks(pod.Uid) == n
	})
	for name, send := range map[string]func() error{
		"UpdatePodSandbox": func() error {
			_, err := runtime.UpdatePodSandbox(ctx, &api.UpdatePodSandboxRequest{Pod: pod, LinuxResources: &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(64 * mi)}}})
			return err
		},
		"PostUpdatePodSandbox": func() error { return runtime.PostUpdatePodSandbox(ctx, &api.PostUpdatePodSandboxRequest{Pod: pod}) },
	} {
		before := ver.podChecks(pod.Uid)
		if err := send(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		waitFor("the pod is watched after "+name, func() bool { return ver.podChecks(pod.Uid) >= before+2 })
	}

	// A second instance (a rolling update) waits for the first's lock
	// instead of registering beside it: two plugins setting the same
	// field would fail every container's creation.
	ver2 := &fakeVerifier{}
	second := &Plugin{SocketPath: socket, HookPath: hookPath, StateDir: stateDir, CgroupVersion: 2, Verifier: ver2, Retry: 50 * time.Millisecond, LockPath: lock}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { defer close(done2); second.Run(ctx2) }()
	t.Cleanup(func() { cancel2(); <-done2 })
	waitFor("the second instance waits for the lock", func() bool {
		return strings.Contains(second.Status(), "waiting for another plugin instance")
	})
	if second.Connected() {
		t.Fatal("the second instance registered while the first holds the lock")
	}
	cancel()
	<-done
	stopped = true
	// The observer (the plugin's dra_swap_nri_connected gauge) heard of
	// the registration and of its end, once each.
	if got := observer.seen(); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("the observer was told %v, want [true false]", got)
	}
	// Registered is not yet synchronized: the runtime calls a plugin only
	// once it answered Synchronize (CI once created the container in
	// between, and the plugin was not asked).
	waitFor("the second instance registers and is synchronized once the first stopped", func() bool {
		_, all := ver2.seen()
		return second.Connected() && len(all) >= 1
	})
	created, err = runtime.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: pod, Container: container(128*mi, applyHook(uidA, "1048576"))})
	if err != nil {
		t.Fatalf("create with the second instance: %v", err)
	}
	if got := created.GetAdjust().GetLinux().GetResources().GetUnified()["memory.swap.max"]; got != "1048576" {
		t.Errorf("create with the second instance: memory.swap.max %q, want 1048576", got)
	}

}

// Environment of TestCallbacksDoNotWaitForTheLock's lock holder.
const (
	envLockStateDir = "NRI_TEST_LOCK_STATE_DIR"
	envLockHeld     = "NRI_TEST_LOCK_HELD"
	envLockRelease  = "NRI_TEST_LOCK_RELEASE"
)

// TestCallbacksDoNotWaitForTheLock: another process (the hook, stuck on
// a thrashing node) holds the hook state's lock while a container is
// resized. The runtime's calls return at once, the runtime keeps the
// plugin (its request timeout is set to 1 s here, half its default, so
// that a callback waiting for the verifier's 2 s lock wait would surely
// outlive it), the update is corrected, and once the lock is free the
// queued check restores the limit the update left.
func TestCallbacksDoNotWaitForTheLock(t *testing.T) {
	if _, ok := testprocess.Child(); ok {
		holdLock(t)
		return
	}
	dir, err := os.MkdirTemp("", "nri") // a socket path must be short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "nri.sock")
	stateDir := filepath.Join(dir, "hook")
	cgroupRoot := filepath.Join(dir, "cgroup")
	const group = "/kubepods/pod1/ctr"
	ctrDir := filepath.Join(stateDir, "ctr")
	if err := hookstate.WriteContainer(ctrDir, hookstate.Container{ID: "ctr", CgroupVersion: 2, CgroupGroup: group}); err != nil {
		t.Fatal(err)
	}
	if err := hookstate.Record(ctrDir, hookstate.ShareKey(uidA, 0), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 100 * mi}}); err != nil {
		t.Fatal(err)
	}
	swapMax := filepath.Join(cgroupRoot, group, "memory.swap.max")
	if err := os.MkdirAll(filepath.Dir(swapMax), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, content := range map[string]string{filepath.Join(cgroupRoot, "cgroup.controllers"): "memory\n", swapMax: "104857600\n"} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	adaptation.SetPluginRequestTimeout(time.Second)
	t.Cleanup(func() { adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout) })
	r, err := adaptation.New("test-runtime", "v0",
		func(ctx context.Context, cb adaptation.SyncCB) error { _, err := cb(ctx, nil, nil); return err },
		func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
			return nil, nil
		},
		adaptation.WithSocketPath(socket), adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)

	rep := &restores{}
	verifier := &limitcheck.Verifier{StateDir: stateDir, CgroupRoot: cgroupRoot, Reporter: rep}
	observer := &transitions{}
	p := &Plugin{SocketPath: socket, HookPath: hookPath, StateDir: stateDir, CgroupVersion: 2, Verifier: verifier, Retry: 50 * time.Millisecond, Observer: observer}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting until %s: %v (status %q)", what, err, p.Status())
		}
	}
	waitFor("the plugin is registered", p.Connected)

	// Another process takes the lock.
	held, release := filepath.Join(dir, "held"), filepath.Join(dir, "release")
	holder := make(chan struct{})
	go func() {
		defer close(holder)
		testprocess.Run(t, "TestCallbacksDoNotWaitForTheLock", 1, func(int) []string {
			return []string{envLockStateDir + "=" + stateDir, envLockHeld + "=" + held, envLockRelease + "=" + release}
		})
	}()
	released := false
	releaseLock := func() {
		if !released {
			released = true
			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Error(err)
			}
			<-holder
		}
	}
	t.Cleanup(releaseLock)
	waitFor("the other process holds the lock", func() bool { _, err := os.Stat(held); return err == nil })

	// The resize: the kubelet's update (its NoSwap value corrected), the
	// runtime applying it (the claim's limit lost), the update's end.
	pod := &api.PodSandbox{Id: "pod1", Name: "p", Namespace: "ns", Uid: podUID}
	ctr := container(192*mi, applyHook(uidA, "104857600"))
	ctr.State = api.ContainerState_CONTAINER_RUNNING
	var longest time.Duration
	timed := func(call func() error) {
		t.Helper()
		start := time.Now()
		if err := call(); err != nil {
			t.Fatal(err)
		}
		longest = max(longest, time.Since(start))
	}
	for i := range 3 {
		timed(func() error {
			updated, err := r.UpdateContainer(ctx, &api.UpdateContainerRequest{Pod: pod, Container: ctr, LinuxResources: &api.LinuxResources{
				Memory: &api.LinuxMemory{Limit: api.Int64(192 * mi)}, Unified: map[string]string{"memory.swap.max": "0"}}})
			if err == nil && len(updated.GetUpdate()) != 1 {
				t.Errorf("resize %d: updates %v, want the container's corrected", i, updated.GetUpdate())
			}
			return err
		})
		if err := os.WriteFile(swapMax, []byte("0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		timed(func() error {
			return r.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: pod, Container: ctr})
		})
		timed(func() error {
			_, err := r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: container(128*mi, applyHook(uidB, "1048576"))})
			return err
		})
	}
	// Longer than the runtime's request timeout: a callback still
	// waiting would have had the plugin dropped by now.
	time.Sleep(1500 * time.Millisecond)
	t.Logf("the runtime's calls took at most %v with the lock held by another process", longest)
	if got := observer.seen(); !p.Connected() || !slices.Equal(got, []bool{true}) {
		t.Fatalf("with the lock held elsewhere: connected %v, registrations and drops %v; want still registered, [true]", p.Connected(), got)
	}
	if got, _ := os.ReadFile(swapMax); strings.TrimSpace(string(got)) != "0" || rep.count() != 0 {
		t.Fatalf("memory.swap.max %q, %d restores while the lock is held; want the update's 0 untouched", got, rep.count())
	}

	releaseLock()
	waitFor("the queued check restores the limit", func() bool {
		got, _ := os.ReadFile(swapMax)
		return strings.TrimSpace(string(got)) == "104857600"
	})
	if n := rep.count(); n != 1 {
		t.Errorf("%d restores reported, want 1", n)
	}
}

// holdLock is the other process of TestCallbacksDoNotWaitForTheLock: it
// holds the hook state's lock until told to let go.
func holdLock(t *testing.T) {
	unlock, err := hookstate.Lock(os.Getenv(envLockStateDir), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if err := os.WriteFile(os.Getenv(envLockHeld), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(os.Getenv(envLockRelease)); err == nil {
			return
		}
	}
	t.Fatal("not told to let go of the lock within a minute")
}

// restores counts the verifier's reports.
type restores struct {
	mu sync.Mutex
	n  int
}

func (r *restores) Restored(context.Context, limitcheck.Drift) { r.mu.Lock(); r.n++; r.mu.Unlock() }
func (r *restores) NotRestored(_ context.Context, d limitcheck.Drift, err error) {
	panic(fmt.Sprintf("not restored: %+v: %v", d, err))
}

func (r *restores) StillNotRestored(_ context.Context, d limitcheck.Drift) {
	panic(fmt.Sprintf("still not restored: %+v", d))
}

func (r *restores) Cleared(context.Context, limitcheck.Drift) {}

func (r *restores) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}
