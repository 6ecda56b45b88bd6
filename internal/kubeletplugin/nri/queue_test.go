package nri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/limitcheck"
)

// scriptedVerifier answers Check with Busy for the first busy calls of
// each container, and records every call.
type scriptedVerifier struct {
	mu     sync.Mutex
	busy   int
	calls  map[string]int
	checks []string
	all    []string
	// gate, if set, blocks every call until it is closed.
	gate chan struct{}
}

func (v *scriptedVerifier) Check(_ context.Context, id, trigger string) (limitcheck.Outcome, error) {
	if v.gate != nil {
		<-v.gate
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.checks = append(v.checks, id+"/"+trigger)
	if v.calls == nil {
		v.calls = map[string]int{}
	}
	v.calls[id]++
	if v.calls[id] <= v.busy {
		return limitcheck.Busy, nil
	}
	return limitcheck.Held, nil
}

func (v *scriptedVerifier) CheckAll(_ context.Context, trigger string, _ time.Duration) (limitcheck.Summary, error) {
	if v.gate != nil {
		<-v.gate
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.all = append(v.all, trigger)
	return limitcheck.Summary{}, nil
}

func (v *scriptedVerifier) CheckPods(context.Context, []string, string) (limitcheck.Summary, error) {
	return limitcheck.Summary{}, nil
}

func (v *scriptedVerifier) seen() ([]string, []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.checks), slices.Clone(v.all)
}

func TestCheckQueue(t *testing.T) {
	ids := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("c%d", i))
		}
		return out
	}
	tests := []struct {
		name string
		// busy: how many times each container's check is Busy.
		busy      int
		add       []string
		addAll    string
		wantCount map[string]int // checks per container
		wantAll   []string
	}{
		{name: "updates of one container while a check runs: one check", add: []string{"a", "a", "a"}, wantCount: map[string]int{"a": 1}},
		{name: "a synchronization: one pass", addAll: "nri-synchronize", wantAll: []string{"nri-synchronize"}},
		{name: "busy: tried again", busy: 3, add: []string{"a"}, wantCount: map[string]int{"a": 4}},
		{name: "busy for good: tried busyRetries more times, then left to the interval", busy: 1000, add: []string{"a"},
			wantCount: map[string]int{"a": busyRetries + 1}},
		{name: "more containers than the queue holds: one pass instead of the rest", add: ids(maxQueued + 5), wantAll: []string{"update"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The worker is held until everything is queued.
			v := &scriptedVerifier{busy: tc.busy, gate: make(chan struct{})}
			q := newCheckQueue()
			q.retry = time.Millisecond
			for _, id := range tc.add {
				q.add(id)
			}
			if tc.addAll != "" {
				q.addAll(tc.addAll)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); q.run(ctx, v) }()
			defer func() { cancel(); <-done }()
			close(v.gate)
			wantChecks := 0
			for _, n := range tc.wantCount {
				wantChecks += n
			}
			if len(tc.add) > maxQueued {
				wantChecks = maxQueued
			}
			if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				checks, all := v.seen()
				return len(checks) >= wantChecks && len(all) >= len(tc.wantAll), nil
			}); err != nil {
				checks, all := v.seen()
				t.Fatalf("checks %d, passes %v; want %d checks, passes %v", len(checks), all, wantChecks, tc.wantAll)
			}
			time.Sleep(50 * time.Millisecond) // nothing more comes
			checks, all := v.seen()
			if len(checks) != wantChecks || !slices.Equal(all, tc.wantAll) {
				t.Errorf("checks %d, passes %v; want %d checks, passes %v", len(checks), all, wantChecks, tc.wantAll)
			}
			for id, n := range tc.wantCount {
				if got := v.calls[id]; got != n {
					t.Errorf("container %s checked %d times, want %d", id, got, n)
				}
			}
		})
	}
}

// TestUpdateContainerWithinBudget: records that do not read (here a FIFO
// that no one writes, as a read of a swapped-out page that takes long)
// cost UpdateContainer CallbackBudget, not the read's time: it answers
// without a correction and queues a check.
func TestUpdateContainerWithinBudget(t *testing.T) {
	stateDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(stateDir, "ctr"), 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(stateDir, "ctr", "container.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The blocked read ends with the test.
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
	})
	p := &Plugin{StateDir: stateDir, CgroupVersion: 2, checks: newCheckQueue()}
	h := &handler{p: p}
	ctr := container(192*mi, applyHook(uidA, "104857600"))
	returned := make(chan []*api.ContainerUpdate, 1)
	go func() {
		updates, _ := h.UpdateContainer(context.Background(), nil, ctr, &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(192 * mi)}})
		returned <- updates
	}()
	select {
	case updates := <-returned:
		if len(updates) != 0 {
			t.Errorf("updates %v, want none: the records did not read", updates)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("UpdateContainer still waits for the records after 10 s")
	}
	if ids, _, _, _ := p.checks.take(); !slices.Equal(ids, []string{"ctr"}) {
		t.Errorf("queued checks %v, want the container's", ids)
	}
}
