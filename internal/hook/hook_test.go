package hook

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookrecord"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
)

const (
	claimA = "00000000-0000-4000-8000-00000000000a"
	claimB = "00000000-0000-4000-8000-00000000000b"
	cid    = "3f2a9c0d1e"
	pid    = 4242
	group  = "/kubepods/burstable/pod1/" + cid
)

type node struct {
	t       *testing.T
	version int
	proc    string
	cgroup  string
	state   string
	dir     string // the container's cgroup dir
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newNode builds temp proc, cgroup and state trees for one container with
// a 128Mi memory limit, as the kubelet leaves it under NoSwap.
func newNode(t testing.TB, version int) *node {
	tt, _ := t.(*testing.T)
	base := t.TempDir()
	n := &node{t: tt, version: version, proc: filepath.Join(base, "proc"), cgroup: filepath.Join(base, "cgroup"), state: filepath.Join(base, "state")}
	w := func(path, content string) { writeFile(t, path, content) }
	if version == 1 {
		w(filepath.Join(n.proc, fmt.Sprint(pid), "cgroup"), "12:pids:"+group+"\n4:memory:"+group+"\n1:name=systemd:/x\n0::/\n")
		n.dir = filepath.Join(n.cgroup, "memory", group)
		w(filepath.Join(n.dir, "memory.limit_in_bytes"), "134217728\n")
		w(filepath.Join(n.dir, "memory.memsw.limit_in_bytes"), "134217728\n")
	} else {
		w(filepath.Join(n.proc, fmt.Sprint(pid), "cgroup"), "0::"+group+"\n")
		w(filepath.Join(n.cgroup, "cgroup.controllers"), "memory\n")
		n.dir = filepath.Join(n.cgroup, group)
		w(filepath.Join(n.dir, "memory.swap.max"), "0\n")
		w(filepath.Join(n.dir, "memory.swap.high"), "max\n")
		w(filepath.Join(n.dir, "memory.zswap.max"), "max\n")
		w(filepath.Join(n.dir, "memory.zswap.writeback"), "1\n")
	}
	return n
}

// args are the hook's arguments on this node: extra, the node's roots, and
// --result-index=0 unless extra names a result index or a cleanup (the
// createRuntime form requires one; most tests have one result per claim).
func (n *node) args(extra ...string) []string {
	args := append([]string{"--state-dir=" + n.state, "--proc-root=" + n.proc, "--cgroup-root=" + n.cgroup}, extra...)
	if !slices.ContainsFunc(extra, func(a string) bool { return a == "--cleanup" || strings.HasPrefix(a, "--result-index=") }) {
		args = append(args, "--result-index=0")
	}
	return args
}

func stateJSON(id string, pid int) string {
	return fmt.Sprintf(`{"ociVersion":"1.2.0","id":%q,"status":"created","pid":%d,"bundle":"/run/bundle","annotations":{"io.kubernetes.cri.sandbox-namespace":"ns","io.kubernetes.cri.sandbox-name":"pod","io.kubernetes.cri.sandbox-uid":"0b5e7c1a-1111-4222-8333-444455556666","io.kubernetes.cri.container-name":"worker"}}`, id, pid)
}

func (n *node) run(args ...string) error {
	return Run(n.args(args...), strings.NewReader(stateJSON(cid, pid)))
}

func (n *node) file(name string) string {
	data, err := os.ReadFile(filepath.Join(n.dir, name))
	if err != nil {
		n.t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func (n *node) limit() string {
	if n.version == 1 {
		return n.file("memory.memsw.limit_in_bytes")
	}
	return n.file("memory.swap.max")
}

// want is the expected control file value for a swap limit.
func (n *node) want(swap int64) string {
	if n.version == 1 {
		return fmt.Sprint(134217728 + swap)
	}
	return fmt.Sprint(swap)
}

func TestApplyAndSum(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			n := newNode(t, version)
			n.t = t
			if err := n.run("--swap-limit=314572800", "--claim-uid="+claimA); err != nil {
				t.Fatal(err)
			}
			if got := n.limit(); got != n.want(314572800) {
				t.Fatalf("after claim A: %s, want %s", got, n.want(314572800))
			}
			// Idempotent for the same claim.
			if err := n.run("--swap-limit=314572800", "--claim-uid="+claimA); err != nil {
				t.Fatal(err)
			}
			if got := n.limit(); got != n.want(314572800) {
				t.Fatalf("after repeating claim A: %s", got)
			}
			// A second claim adds up.
			if err := n.run("--swap-limit=104857600", "--claim-uid="+claimB); err != nil {
				t.Fatal(err)
			}
			if got := n.limit(); got != n.want(419430400) {
				t.Fatalf("after claim B: %s, want %s", got, n.want(419430400))
			}
			// Cleanup removes the container's records.
			if err := n.run("--cleanup", "--claim-uid="+claimA); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(n.state, cid)); !os.IsNotExist(err) {
				t.Errorf("state left after cleanup: %v", err)
			}
			if err := n.run("--cleanup", "--claim-uid="+claimA); err != nil {
				t.Errorf("second cleanup: %v", err)
			}
		})
	}
}

func TestV2Knobs(t *testing.T) {
	n := newNode(t, 2)
	n.t = t
	if err := n.run("--swap-limit=1000", "--claim-uid="+claimA, "--swap-high=800", "--zswap=on"); err != nil {
		t.Fatal(err)
	}
	if err := n.run("--swap-limit=500", "--claim-uid="+claimB, "--zswap=off"); err != nil {
		t.Fatal(err)
	}
	// swap.high: 800 from A plus B's whole limit, since B does not throttle.
	for file, want := range map[string]string{"memory.swap.max": "1500", "memory.swap.high": "1300", "memory.zswap.max": "0"} {
		if got := n.file(file); got != want {
			t.Errorf("%s = %s, want %s", file, got, want)
		}
	}
	if err := n.run("--swap-limit=1", "--claim-uid="+claimA, "--swappiness=10"); err == nil || !strings.Contains(err.Error(), "swappiness") {
		t.Errorf("swappiness on v2: %v", err)
	}
}

// TestCompressedOnlyAndOffload: a claim that keeps pages compressed only
// turns the container's zswap writeback off; an offload budget is
// recorded for the plugin's loop and writes nothing.
func TestCompressedOnlyAndOffload(t *testing.T) {
	n := newNode(t, 2)
	n.t = t
	if err := n.run("--swap-limit=1000", "--claim-uid="+claimA, "--result-index=0", "--zswap-writeback=off", "--offload-max-stall=50"); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"memory.swap.max": "1000", "memory.zswap.max": "max", "memory.zswap.writeback": "0"} {
		if got := n.file(file); got != want {
			t.Errorf("%s = %s, want %s", file, got, want)
		}
	}
	totals, err := hookstate.Sum(filepath.Join(n.state, cid))
	if err != nil {
		t.Fatal(err)
	}
	if s := totals.Container; !s.ZswapWritebackOff || s.OffloadMaxStall == nil || *s.OffloadMaxStall != 50 {
		t.Errorf("the container's records sum to %+v, want zswap writeback off and an offload budget of 50", s)
	}
	v1 := newNode(t, 1)
	v1.t = t
	if err := v1.run("--swap-limit=1048576", "--claim-uid="+claimA, "--zswap-writeback=off"); err == nil || !strings.Contains(err.Error(), "memory.zswap.writeback exist only on cgroup v2") {
		t.Errorf("zswap writeback on v1: %v", err)
	}
}

func TestV1Swappiness(t *testing.T) {
	n := newNode(t, 1)
	n.t = t
	writeFile(t, filepath.Join(n.dir, "memory.swappiness"), "60")
	if err := n.run("--swap-limit=1048576", "--claim-uid="+claimA, "--swappiness=30"); err != nil {
		t.Fatal(err)
	}
	if err := n.run("--swap-limit=1048576", "--claim-uid="+claimB, "--swappiness=10"); err != nil {
		t.Fatal(err)
	}
	if got := n.file("memory.swappiness"); got != "10" {
		t.Errorf("swappiness = %s, want the lowest asked, 10", got)
	}
}

func TestV1NoMemoryLimit(t *testing.T) {
	n := newNode(t, 1)
	n.t = t
	writeFile(t, filepath.Join(n.dir, "memory.limit_in_bytes"), "9223372036854771712")
	err := n.run("--swap-limit=1048576", "--claim-uid="+claimA)
	if err == nil || !strings.Contains(err.Error(), "container ns/pod/worker has no memory limit") {
		t.Fatalf("error = %v", err)
	}
}

func TestBundleFallback(t *testing.T) {
	n := newNode(t, 2)
	n.t = t
	os.RemoveAll(filepath.Join(n.proc, fmt.Sprint(pid)))
	bundle := t.TempDir()
	writeFile(t, filepath.Join(bundle, "config.json"), `{"linux":{"cgroupsPath":"`+group+`"}}`)
	state := strings.Replace(stateJSON(cid, pid), "/run/bundle", bundle, 1)
	if err := Run(n.args("--swap-limit=4096", "--claim-uid="+claimA), strings.NewReader(state)); err != nil {
		t.Fatal(err)
	}
	if got := n.file("memory.swap.max"); got != "4096" {
		t.Errorf("swap.max = %s", got)
	}
	// systemd-style paths are not paths.
	writeFile(t, filepath.Join(bundle, "config.json"), `{"linux":{"cgroupsPath":"kubepods.slice:cri-containerd:abc"}}`)
	if err := Run(n.args("--swap-limit=4096", "--claim-uid="+claimA), strings.NewReader(state)); err == nil || !strings.Contains(err.Error(), "no plain cgroups path") {
		t.Errorf("systemd path: %v", err)
	}
}

func TestRejectsBadInput(t *testing.T) {
	n := newNode(t, 2)
	n.t = t
	tests := []struct {
		name    string
		args    []string
		state   string
		wantErr string
	}{
		{name: "no limit", args: []string{"--claim-uid=" + claimA}, wantErr: "--swap-limit is required"},
		{name: "negative limit", args: []string{"--swap-limit=-1", "--claim-uid=" + claimA}, wantErr: "whole number"},
		{name: "text limit", args: []string{"--swap-limit=1Gi", "--claim-uid=" + claimA}, wantErr: "whole number"},
		{name: "huge limit", args: []string{"--swap-limit=99999999999999999999", "--claim-uid=" + claimA}, wantErr: "whole number"},
		{name: "limit above the largest swap value", args: []string{"--swap-limit=1125899906842625", "--claim-uid=" + claimA}, wantErr: "whole number from 0 to 1125899906842624"},
		{name: "pod limit above the largest swap value", args: []string{"--swap-limit=10", "--claim-uid=" + claimA, "--pod-uid=3f2e1d0c-9b8a-4766-8554-433221100fed", "--pod-swap-limit=1125899906842625"}, wantErr: "--pod-swap-limit"},
		{name: "high above limit", args: []string{"--swap-limit=10", "--swap-high=11", "--claim-uid=" + claimA}, wantErr: "--swap-high"},
		{name: "bad zswap", args: []string{"--swap-limit=10", "--zswap=maybe", "--claim-uid=" + claimA}, wantErr: "--zswap"},
		{name: "zswap writeback on", args: []string{"--swap-limit=10", "--zswap-writeback=on", "--claim-uid=" + claimA}, wantErr: `--zswap-writeback "on" must be off`},
		{name: "offload budget 0", args: []string{"--swap-limit=10", "--offload-max-stall=0", "--claim-uid=" + claimA}, wantErr: "--offload-max-stall \"0\" must be a whole number from 1 to 10000"},
		{name: "offload budget above 100 %", args: []string{"--swap-limit=10", "--offload-max-stall=10001", "--claim-uid=" + claimA}, wantErr: "--offload-max-stall"},
		{name: "offload budget as a percentage", args: []string{"--swap-limit=10", "--offload-max-stall=0.5", "--claim-uid=" + claimA}, wantErr: "--offload-max-stall"},
		{name: "cleanup with offload", args: []string{"--cleanup", "--claim-uid=" + claimA, "--offload-max-stall=5"}, wantErr: "--cleanup takes no limits"},
		{name: "swappiness 101", args: []string{"--swap-limit=10", "--swappiness=101", "--claim-uid=" + claimA}, wantErr: "--swappiness"},
		{name: "path as uid", args: []string{"--swap-limit=10", "--claim-uid=../../etc"}, wantErr: "not a Kubernetes UID"},
		{name: "negative result index", args: []string{"--swap-limit=10", "--claim-uid=" + claimA, "--result-index=-1"}, wantErr: "--result-index"},
		{name: "huge result index", args: []string{"--swap-limit=10", "--claim-uid=" + claimA, "--result-index=10000"}, wantErr: "--result-index"},
		{name: "path as pod uid", args: []string{"--swap-limit=10", "--claim-uid=" + claimA, "--pod-uid=../x"}, wantErr: "--pod-uid"},
		{name: "text pod limit", args: []string{"--swap-limit=10", "--claim-uid=" + claimA, "--pod-swap-limit=1Gi"}, wantErr: "--pod-swap-limit"},
		{name: "cleanup with pod", args: []string{"--cleanup", "--claim-uid=" + claimA, "--pod-uid=" + claimB}, wantErr: "--cleanup takes no limits"},
		{name: "unknown flag", args: []string{"--swap-limit=10", "--claim-uid=" + claimA, "--exec=/bin/sh"}, wantErr: "arguments: flag provided but not defined: -exec (unknown to this hook: was the CDI spec written by a newer dra.swap release?)"},
		{name: "unknown flag in cleanup", args: []string{"--cleanup", "--claim-uid=" + claimA, "--future-knob=1"}, wantErr: "flag provided but not defined: -future-knob (unknown to this hook"},
		{name: "missing flag value", args: []string{"--swap-limit=10", "--result-index=0", "--claim-uid"}, wantErr: "arguments: flag needs an argument"},
		{name: "positional", args: []string{"--swap-limit=10", "--claim-uid=" + claimA, "extra"}, wantErr: "unexpected arguments"},
		{name: "relative state dir", args: []string{"--swap-limit=10", "--claim-uid=" + claimA, "--state-dir=state"}, wantErr: "--state-dir"},
		{name: "cleanup with limit", args: []string{"--cleanup", "--swap-limit=10", "--claim-uid=" + claimA}, wantErr: "--cleanup takes no limits"},
		{name: "empty stdin", args: []string{"--swap-limit=10", "--claim-uid=" + claimA}, state: " ", wantErr: "decode OCI state"},
		{name: "container id with slash", args: []string{"--swap-limit=10", "--claim-uid=" + claimA}, state: stateJSON("../../x", pid), wantErr: "not a valid container ID"},
		{name: "pid 0", args: []string{"--swap-limit=10", "--claim-uid=" + claimA}, state: stateJSON(cid, 0), wantErr: "no process id"},
		{name: "unknown pid", args: []string{"--swap-limit=10", "--claim-uid=" + claimA}, state: stateJSON(cid, 7), wantErr: "find its cgroup"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			state := tc.state
			if state == "" {
				state = stateJSON(cid, pid)
			}
			err := Run(n.args(tc.args...), strings.NewReader(state))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want %q", err, tc.wantErr)
			}
			if got := n.file("memory.swap.max"); got != "0" {
				t.Errorf("swap.max changed to %s", got)
			}
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		in          string
		wantVersion int
		wantGroup   string
		wantErr     bool
	}{
		{in: "4:memory:/kubepods/pod1/c\n0::/\n", wantVersion: 1, wantGroup: "/kubepods/pod1/c"},
		{in: "7:cpu,memory:/a\n", wantVersion: 1, wantGroup: "/a"},
		{in: "0::/kubepods.slice/c\n", wantVersion: 2, wantGroup: "/kubepods.slice/c"},
		{in: "1:name=systemd:/x\n", wantErr: true},
		{in: "", wantErr: true},
		{in: "4:memory:relative\n", wantErr: true},
		{in: "0::/a/../../b\n", wantErr: true},
		{in: "garbage", wantErr: true},
	}
	for _, tc := range tests {
		v, g, err := ParseProcCgroup(strings.NewReader(tc.in))
		if (err != nil) != tc.wantErr || v != tc.wantVersion || (err == nil && g != tc.wantGroup) {
			t.Errorf("ParseProcCgroup(%q) = %d, %q, %v", tc.in, v, g, err)
		}
	}
}

func FuzzParseState(f *testing.F) {
	f.Add([]byte(stateJSON(cid, pid)))
	f.Add([]byte(`{"id":"x","pid":-1}`))
	f.Add([]byte(`{"id":"","annotations":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		state, err := ParseState(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		if !limits.IsContainerID(state.ID) || strings.ContainsAny(state.ID, "/\x00") {
			t.Fatalf("accepted container id %q", state.ID)
		}
		_ = ContainerName(state)
	})
}

func FuzzParseProcCgroup(f *testing.F) {
	f.Add("4:memory:/kubepods/pod1/c\n0::/\n")
	f.Add("0::/a\n")
	f.Add("::::\n")
	f.Fuzz(func(t *testing.T, in string) {
		_, g, err := ParseProcCgroup(strings.NewReader(in))
		if err == nil && (!strings.HasPrefix(g, "/") || strings.Contains(g, "..")) {
			t.Fatalf("accepted cgroup path %q", g)
		}
	})
}

func BenchmarkHookRun(b *testing.B) {
	for _, version := range []int{1, 2} {
		b.Run(fmt.Sprintf("cgroupv%d", version), func(b *testing.B) {
			n := newNode(b, version)
			args := n.args("--swap-limit=314572800", "--claim-uid="+claimA)
			state := stateJSON(cid, pid)
			for b.Loop() {
				if err := Run(args, strings.NewReader(state)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func readRecord(t *testing.T, n *node) hookrecord.Record {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.state, hookrecord.Dir, cid+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var r hookrecord.Record
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestEventRecords(t *testing.T) {
	tests := []struct {
		name      string
		version   int
		noLimit   bool
		wantLimit int64
		wantErr   string
	}{
		{name: "v1 applied", version: 1, wantLimit: 419430400},
		{name: "v2 applied", version: 2, wantLimit: 419430400},
		{name: "v1 without a memory limit", version: 1, noLimit: true, wantErr: "has no memory limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, tc.version)
			n.t = t
			if tc.noLimit {
				writeFile(t, filepath.Join(n.dir, "memory.limit_in_bytes"), "9223372036854771712")
			}
			_ = n.run("--swap-limit=314572800", "--claim-uid="+claimA)
			err := n.run("--swap-limit=104857600", "--claim-uid="+claimB)
			if (err != nil) != (tc.wantErr != "") {
				t.Fatalf("error = %v", err)
			}
			r := readRecord(t, n)
			if r.Namespace != "ns" || r.Pod != "pod" || r.Container != "worker" || r.PodUID == "" || r.Time.IsZero() {
				t.Errorf("record identifies %+v", r)
			}
			if tc.wantErr != "" {
				if !strings.Contains(r.Error, tc.wantErr) {
					t.Errorf("record error %q, want %q", r.Error, tc.wantErr)
				}
				return
			}
			if r.Error != "" || r.LimitBytes != tc.wantLimit || r.CgroupVersion != tc.version {
				t.Errorf("record %+v, want limit %d on v%d", r, tc.wantLimit, tc.version)
			}
		})
	}
	// A container without CRI annotations (not Kubernetes') leaves none.
	n := newNode(t, 2)
	n.t = t
	if err := Run(n.args("--swap-limit=1048576", "--claim-uid="+claimA), strings.NewReader(fmt.Sprintf(`{"ociVersion":"1.2.0","id":%q,"status":"created","pid":%d,"bundle":"/run/bundle"}`, cid, pid))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(n.state, hookrecord.Dir)); !os.IsNotExist(err) {
		t.Errorf("record written for a non-Kubernetes container: %v", err)
	}
}
