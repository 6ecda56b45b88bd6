package hook

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dra-driver-swap/dra-driver-swap/internal/hookrecord"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
)

// testPodUID is the pod UID in stateJSON's annotations.
const testPodUID = "0b5e7c1a-1111-4222-8333-444455556666"

// podNode is a node whose container sits in its pod's cgroup, named the
// way the cgroupfs or the systemd driver names it, with a 256Mi pod memory
// limit on v1.
type podNode struct {
	*node
	podDir string
}

func newPodNode(t *testing.T, version int, podCgroup string) *podNode {
	n := newNode(t, version)
	n.t = t
	group := podCgroup + "/" + cid
	if version == 1 {
		writeFile(t, filepath.Join(n.proc, fmt.Sprint(pid), "cgroup"), "4:memory:"+group+"\n0::/\n")
		n.dir = filepath.Join(n.cgroup, "memory", group)
		writeFile(t, filepath.Join(n.dir, "memory.limit_in_bytes"), "134217728\n")
		writeFile(t, filepath.Join(n.dir, "memory.memsw.limit_in_bytes"), "134217728\n")
		p := &podNode{node: n, podDir: filepath.Join(n.cgroup, "memory", podCgroup)}
		writeFile(t, filepath.Join(p.podDir, "memory.limit_in_bytes"), "268435456\n")
		writeFile(t, filepath.Join(p.podDir, "memory.memsw.limit_in_bytes"), "9223372036854771712\n")
		return p
	}
	writeFile(t, filepath.Join(n.proc, fmt.Sprint(pid), "cgroup"), "0::"+group+"\n")
	n.dir = filepath.Join(n.cgroup, group)
	writeFile(t, filepath.Join(n.dir, "memory.swap.max"), "0\n")
	p := &podNode{node: n, podDir: filepath.Join(n.cgroup, podCgroup)}
	writeFile(t, filepath.Join(p.podDir, "memory.swap.max"), "max\n")
	return p
}

func (p *podNode) podLimit() string {
	name := "memory.swap.max"
	if p.version == 1 {
		name = "memory.memsw.limit_in_bytes"
	}
	data, err := os.ReadFile(filepath.Join(p.podDir, name))
	if err != nil {
		p.t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func (p *podNode) wantPod(swap int64) string {
	if p.version == 1 {
		return fmt.Sprint(268435456 + swap)
	}
	return fmt.Sprint(swap)
}

// Each allocation result of a claim is its own share: a container that
// gets the devices of two results of one claim adds them up, and running
// one result's hook again changes nothing.
func TestResultSharesAddUp(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			n := newNode(t, version)
			n.t = t
			for range 2 {
				if err := n.run("--swap-limit=104857600", "--claim-uid="+claimA, "--result-index=0"); err != nil {
					t.Fatal(err)
				}
			}
			if got := n.limit(); got != n.want(100<<20) {
				t.Fatalf("after result 0: %s, want %s", got, n.want(100<<20))
			}
			if err := n.run("--swap-limit=209715200", "--claim-uid="+claimA, "--result-index=1"); err != nil {
				t.Fatal(err)
			}
			if got := n.limit(); got != n.want(300<<20) {
				t.Fatalf("after result 1: %s, want %s", got, n.want(300<<20))
			}
			if _, err := os.Stat(filepath.Join(n.state, cid, hookstate.ShareKey(claimA, 1))); err != nil {
				t.Errorf("share record: %v", err)
			}
		})
	}
}

// A claim granted to one pod refuses the containers of every other pod,
// before anything is written, and says why in the error and the event
// record.
func TestClaimOfAnotherPodIsRefused(t *testing.T) {
	n := newNode(t, 2)
	n.t = t
	const other = "99999999-1111-4222-8333-444455556666"
	err := n.run("--swap-limit=1048576", "--claim-uid="+claimA, "--result-index=0", "--pod-uid="+other)
	if err == nil || !strings.Contains(err.Error(), "grants its swap to pod "+other+" only, and this container belongs to pod "+testPodUID) ||
		!strings.Contains(err.Error(), "ResourceClaimTemplate") {
		t.Fatalf("error = %v", err)
	}
	if got := n.file("memory.swap.max"); got != "0" {
		t.Errorf("swap.max = %s, want the kubelet's 0", got)
	}
	if _, err := os.Stat(filepath.Join(n.state, cid)); !os.IsNotExist(err) {
		t.Errorf("records written for a refused container: %v", err)
	}
	records, _ := filepath.Glob(filepath.Join(n.state, hookrecord.Dir, "*.json"))
	if len(records) != 1 {
		t.Fatalf("event records = %v, want one", records)
	}
	data, _ := os.ReadFile(records[0])
	if !strings.Contains(string(data), "a swap claim serves one pod") {
		t.Errorf("event record %s lacks the reason", data)
	}
	// The pod the claim is granted to gets it.
	if err := n.run("--swap-limit=1048576", "--claim-uid="+claimA, "--result-index=0", "--pod-uid="+testPodUID); err != nil {
		t.Fatal(err)
	}
	if got := n.file("memory.swap.max"); got != "1048576" {
		t.Errorf("swap.max = %s", got)
	}
}

// A pod whose containers share a claim gets the claims' sum as its
// budget in its own cgroup; each container keeps its own limit.
func TestPodBudget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version int
		pod     string
	}{
		{name: "v1 cgroupfs", version: 1, pod: "/kubepods/burstable/pod" + testPodUID},
		{name: "v2 cgroupfs", version: 2, pod: "/kubepods/burstable/pod" + testPodUID},
		{name: "v2 systemd", version: 2, pod: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(testPodUID, "-", "_") + ".slice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPodNode(t, tc.version, tc.pod)
			if err := p.run("--swap-limit=209715200", "--claim-uid="+claimA, "--result-index=0", "--pod-uid="+testPodUID, "--pod-swap-limit=209715200"); err != nil {
				t.Fatal(err)
			}
			if got := p.limit(); got != p.want(200<<20) {
				t.Errorf("container limit = %s, want %s", got, p.want(200<<20))
			}
			if got := p.podLimit(); got != p.wantPod(200<<20) {
				t.Errorf("pod limit = %s, want %s", got, p.wantPod(200<<20))
			}
			c, err := hookstate.ReadContainer(filepath.Join(p.state, cid))
			if err != nil {
				t.Fatal(err)
			}
			if c.PodCgroupGroup != tc.pod {
				t.Errorf("recorded pod cgroup %q, want %q", c.PodCgroupGroup, tc.pod)
			}
			// A claim prepared later for the pod knows the larger budget.
			if err := p.run("--swap-limit=104857600", "--claim-uid="+claimB, "--result-index=0", "--pod-uid="+testPodUID, "--pod-swap-limit=314572800"); err != nil {
				t.Fatal(err)
			}
			if got := p.podLimit(); got != p.wantPod(300<<20) {
				t.Errorf("pod limit = %s, want %s", got, p.wantPod(300<<20))
			}
		})
	}
}

func TestPodBudgetRefusals(t *testing.T) {
	t.Run("neither parent nor grandparent is the pod's cgroup", func(t *testing.T) {
		p := newPodNode(t, 2, "/kubepods/burstable/pod-something-else")
		err := p.run("--swap-limit=1048576", "--claim-uid="+claimA, "--pod-uid="+testPodUID, "--pod-swap-limit=1048576")
		if err == nil || !strings.Contains(err.Error(), "is the cgroup of pod "+testPodUID+", so the pod's swap budget cannot be set") {
			t.Fatalf("error = %v", err)
		}
		if got := p.file("memory.swap.max"); got != "0" {
			t.Errorf("container swap.max = %s, want untouched", got)
		}
	})
	t.Run("v1 pod without a memory limit", func(t *testing.T) {
		p := newPodNode(t, 1, "/kubepods/burstable/pod"+testPodUID)
		writeFile(t, filepath.Join(p.podDir, "memory.limit_in_bytes"), "9223372036854771712\n")
		err := p.run("--swap-limit=1048576", "--claim-uid="+claimA, "--pod-uid="+testPodUID, "--pod-swap-limit=1048576")
		if err == nil || !strings.Contains(err.Error(), "the pod's swap budget: pod ns/pod has no memory limit") {
			t.Fatalf("error = %v", err)
		}
	})
}

// Containers of one pod may carry different budgets (claims prepared in
// different kubelet calls): whichever container's hook runs last, the
// pod's cgroup holds the largest of them.
func TestPodBudgetIsTheLargestOfItsContainers(t *testing.T) {
	const (
		cid2 = "7b1e5f0a2c"
		pid2 = 4343
	)
	podGroup := "/kubepods/burstable/pod" + testPodUID
	p := newPodNode(t, 2, podGroup)
	writeFile(t, filepath.Join(p.proc, fmt.Sprint(pid2), "cgroup"), "0::"+podGroup+"/"+cid2+"\n")
	writeFile(t, filepath.Join(p.cgroup, podGroup, cid2, "memory.swap.max"), "0\n")
	// The second container's claims were prepared knowing the pod's 300Mi.
	if err := Run(p.args("--swap-limit=314572800", "--claim-uid="+claimB, "--result-index=0", "--pod-uid="+testPodUID, "--pod-swap-limit=314572800"),
		strings.NewReader(stateJSON(cid2, pid2))); err != nil {
		t.Fatal(err)
	}
	// The first container's claim was prepared before: it knew 100Mi.
	if err := p.run("--swap-limit=104857600", "--claim-uid="+claimA, "--result-index=0", "--pod-uid="+testPodUID, "--pod-swap-limit=104857600"); err != nil {
		t.Fatal(err)
	}
	if got := p.podLimit(); got != p.wantPod(300<<20) {
		t.Errorf("pod limit = %s, want the largest budget %s", got, p.wantPod(300<<20))
	}
	if got := p.limit(); got != p.want(100<<20) {
		t.Errorf("container limit = %s, want its own %s", got, p.want(100<<20))
	}
}

// The hook changes and applies records only under the state directory's
// lock: while the verifier holds it, the hook waits, writing nothing, and
// goes on once the verifier lets go.
func TestApplyWaitsForTheVerifier(t *testing.T) {
	n := newNode(t, 2)
	n.t = t
	runlock, ok, err := hookstate.RLock(n.state, time.Nanosecond)
	if err != nil || !ok {
		t.Fatalf("RLock: %v, %v", ok, err)
	}
	done := make(chan error, 1)
	go func() { done <- n.run("--swap-limit=104857600", "--claim-uid="+claimA, "--result-index=0") }()
	// Without the lock the hook is done in a few milliseconds; with it, it
	// is still waiting after half a second (its wait is 10 s).
	select {
	case err := <-done:
		runlock()
		t.Fatalf("the hook ran (%v) while the verifier held the records' lock", err)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := os.Stat(filepath.Join(n.state, cid)); !os.IsNotExist(err) || n.limit() != "0" {
		t.Errorf("the hook wrote while waiting: records %v, swap.max %s", err, n.limit())
	}
	runlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := n.limit(); got != n.want(100<<20) {
		t.Errorf("swap.max = %s after the verifier let go, want %s", got, n.want(100<<20))
	}
}

// crunNode is a v2 node of the systemd cgroup driver with crun: crun
// creates the container's scope (crio-<id>.scope) in the pod's slice and
// moves the process into the scope's "container" subgroup, and both the
// scope (MemorySwapMax, from the kubelet's memory.swap.max of 0) and the
// subgroup hold the kubelet's 0.
func newCrunNode(t *testing.T) (n *podNode, scopeDir string) {
	pod := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(testPodUID, "-", "_") + ".slice"
	scope := pod + "/crio-" + cid + ".scope"
	n = newPodNode(t, 2, pod)
	leaf := scope + "/container"
	writeFile(t, filepath.Join(n.proc, fmt.Sprint(pid), "cgroup"), "0::"+leaf+"\n")
	n.dir = filepath.Join(n.cgroup, leaf)
	writeFile(t, filepath.Join(n.dir, "memory.swap.max"), "0\n")
	scopeDir = filepath.Join(n.cgroup, scope)
	writeFile(t, filepath.Join(scopeDir, "memory.swap.max"), "0\n")
	return n, scopeDir
}

// With crun's systemd driver the process's cgroup is the "container"
// subgroup of the container's scope: the pod's cgroup is the nearest pod
// ancestor (the grandparent), and the limit goes on the scope too, which
// bounds the subgroup (a limit on the subgroup alone, under the scope's 0,
// would let the container swap nothing).
func TestCrunSystemdLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		pod  string // the pod cgroup's swap.max afterwards
	}{
		{name: "own claim", args: []string{"--swap-limit=209715200", "--claim-uid=" + claimA, "--result-index=0", "--pod-uid=" + testPodUID}, pod: "max"},
		{name: "shared claim: pod budget", args: []string{"--swap-limit=209715200", "--claim-uid=" + claimA, "--result-index=0", "--pod-uid=" + testPodUID, "--pod-swap-limit=209715200"}, pod: "209715200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, scopeDir := newCrunNode(t)
			if err := n.run(tc.args...); err != nil {
				t.Fatal(err)
			}
			if got := n.limit(); got != "209715200" {
				t.Errorf("subgroup swap.max = %s, want 209715200", got)
			}
			if got := strings.TrimSpace(readFile(t, filepath.Join(scopeDir, "memory.swap.max"))); got != "209715200" {
				t.Errorf("scope swap.max = %s, want 209715200 (the scope bounds the subgroup)", got)
			}
			if got := n.podLimit(); got != tc.pod {
				t.Errorf("pod swap.max = %s, want %s", got, tc.pod)
			}
			c, err := hookstate.ReadContainer(filepath.Join(n.state, cid))
			if err != nil {
				t.Fatal(err)
			}
			scope, pod := strings.TrimPrefix(scopeDir, n.cgroup), strings.TrimPrefix(n.podDir, n.cgroup)
			if c.CgroupGroup != scope+"/container" || c.OuterCgroupGroup != scope {
				t.Errorf("recorded cgroups %q in %q, want %q in %q", c.CgroupGroup, c.OuterCgroupGroup, scope+"/container", scope)
			}
			if tc.pod != "max" && c.PodCgroupGroup != pod {
				t.Errorf("recorded pod cgroup %q, want %q", c.PodCgroupGroup, pod)
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
