package hookargs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// argSep separates the arguments of FuzzParseArgs' input: NUL cannot occur
// inside an argv element, so every split is one the kernel could pass.
const argSep = "\x00"

func FuzzParseArgs(f *testing.F) {
	for _, args := range [][]string{
		// createRuntime, as release 0.2.0 writes it (see ParseArgs).
		{"--swap-limit=314572800", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook", "--result-index=0"},
		{"--swap-limit=104857600", "--claim-uid=" + claimB, "--state-dir=/run/dra-swap/hook", "--swap-high=83886080", "--zswap=off", "--swappiness=0", "--result-index=1"},
		{"--swap-limit=0", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook", "--zswap=on", "--swappiness=100", "--result-index=0"},
		{"--swap-limit=1125899906842624", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook", "--swap-high=1125899906842624", "--result-index=0"},
		{"--swap-limit=1073741824", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook", "--swap-high=858993459", "--zswap=off", "--swappiness=10",
			"--result-index=0", "--pod-uid=3f2e1d0c-9b8a-4766-8554-433221100fed", "--pod-swap-limit=1610612736"},
		{"--swap-limit=0", "--claim-uid=" + claimB, "--state-dir=/run/dra-swap/hook", "--result-index=9999"},
		{"--swap-limit=1", "--claim-uid=" + claimB, "--result-index=10000"},
		{"--swap-limit=1", "--claim-uid=" + claimB, "--result-index=-1"},
		{"--swap-limit=1", "--claim-uid=" + claimB, "--pod-uid=pod"},
		{"--cleanup", "--claim-uid=" + claimA, "--result-index=0"},
		{"--swap-limit=1", "--claim-uid=" + claimB, "--zswap-writeback=off", "--offload-max-stall=50"},
		{"--swap-limit=1", "--claim-uid=" + claimB, "--offload-max-stall=0"},
		{"--swap-limit=1", "--claim-uid=" + claimB, "--zswap-writeback=on"},
		// poststop.
		{"--cleanup", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook"},
		// The test-only flags, and the separate-value flag syntax.
		{"-swap-limit", "1048576", "-claim-uid", claimA, "--state-dir", "/run/dra-swap/hook", "--proc-root=/proc", "--cgroup-root=/sys/fs/cgroup"},
		// Rejected: no result index, out of range, unclean paths, limits with --cleanup.
		{"--swap-limit=1", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook"},
		{"--swap-limit=4611686018427387905", "--claim-uid=" + claimA},
		{"--swap-limit=100", "--swap-high=101", "--claim-uid=" + claimA},
		{"--swap-limit=-1", "--claim-uid=" + claimA},
		{"--swap-limit=1", "--swappiness=101", "--claim-uid=" + claimA},
		{"--swap-limit=1", "--zswap=maybe", "--claim-uid=" + claimA},
		{"--swap-limit=1", "--claim-uid=" + claimA, "--state-dir=/run/../etc"},
		{"--swap-limit=1", "--claim-uid=" + claimA, "--state-dir=run/x/"},
		{"--cleanup", "--swap-limit=1", "--claim-uid=" + claimA},
		{"--cleanup=false", "--claim-uid=" + claimA},
		{"--swap-limit=1", "--claim-uid=../../" + claimA},
		{"--swap-limit=1", "--claim-uid=" + strings.ToUpper(claimA)},
		// Unknown flags, stray arguments, garbage.
		{"--swap-limit=1", "--claim-uid=" + claimA, "--memory-limit=1"},
		{"--swap-limit=1", "--claim-uid=" + claimA, "extra"},
		{"--swap-limit=1", "--", "--claim-uid=" + claimA},
		{"-h"},
		{""},
		{"\xff\xfe", "=", "---"},
	} {
		f.Add(strings.Join(args, argSep))
	}
	// The hooks of every released CDI spec (see ParseArgs).
	for _, args := range releasedHookArgs(f) {
		f.Add(strings.Join(args, argSep))
	}
	f.Fuzz(func(t *testing.T, in string) {
		var args []string
		if in != "" {
			args = strings.Split(in, argSep)
		}
		cfg, req, err := ParseArgs(args)
		if err != nil {
			return
		}
		checkParsedArgs(t, args, cfg, req)
		// The hook can record whatever share it accepts.
		if !req.Cleanup {
			if err := hookstate.Record(t.TempDir(), req.ShareKey(), req.Share); err != nil {
				t.Fatalf("ParseArgs(%q) accepted a share that cannot be recorded: %v", args, err)
			}
		}
		// What was accepted, written out by FormatArgs (as the CDI spec
		// writer does), parses to the same request.
		formatted := FormatArgs(cfg, req)
		cfg2, req2, err := ParseArgs(formatted)
		if err != nil {
			t.Fatalf("ParseArgs(%q) accepted, but FormatArgs' form %q is rejected: %v", args, formatted, err)
		}
		if msg := diffParsed(cfg, req, cfg2, req2); msg != "" {
			t.Fatalf("ParseArgs(%q) and FormatArgs' form %q differ: %s", args, formatted, msg)
		}
	})
}

// FuzzFormatArgs builds a valid request from the fuzzer's numbers (each
// reduced into its range) and checks that ParseArgs reads what FormatArgs
// writes back to the same configuration and request.
func FuzzFormatArgs(f *testing.F) {
	for _, seed := range []struct {
		cleanup, high, swappy, pod, podLimit, roots, writebackOff, offload bool
		limit, highV, podLimitV                                            int64
		zswap, swappyV                                                     uint8
		index, offloadV                                                    int16
		stateDir                                                           string
	}{
		{limit: 314572800, index: -1, stateDir: DefaultStateDir},
		{cleanup: true, index: -1, stateDir: DefaultStateDir},
		{high: true, swappy: true, pod: true, podLimit: true, limit: 1 << 30, highV: 858993459, zswap: 2, swappyV: 10, podLimitV: 3 << 29, stateDir: DefaultStateDir},
		{high: true, limit: limits.MaxSwapBytes, highV: limits.MaxSwapBytes, zswap: 1, index: limits.MaxResultIndex, roots: true, stateDir: "/var/lib/x"},
		{swappy: true, swappyV: 100, index: 7, podLimit: true, podLimitV: limits.MaxSwapBytes, stateDir: "/"},
		{limit: -5, highV: -1, zswap: 255, swappyV: 255, index: -32768, stateDir: "relative/../x"},
		{limit: 1 << 30, writebackOff: true, offload: true, offloadV: 50, index: 0, stateDir: DefaultStateDir},
		{offload: true, offloadV: -32768, stateDir: DefaultStateDir},
	} {
		f.Add(seed.cleanup, seed.high, seed.swappy, seed.pod, seed.podLimit, seed.roots, seed.writebackOff, seed.offload, seed.limit, seed.highV, seed.podLimitV,
			seed.zswap, seed.swappyV, seed.index, seed.offloadV, seed.stateDir)
	}
	f.Fuzz(func(t *testing.T, cleanup, high, swappy, pod, podLimit, roots, writebackOff, offload bool, limit, highV, podLimitV int64,
		zswap, swappyV uint8, index, offloadV int16, stateDir string) {
		cfg := SpecConfig(filepath.Join("/", stateDir)) // clean and absolute, as ParseArgs wants it
		if roots {
			cfg.ProcRoot, cfg.CgroupRoot = "/host/proc", "/host/sys/fs/cgroup"
		}
		req := Request{Cleanup: true, ClaimUID: claimA, ResultIndex: -1}
		if !cleanup {
			req = Request{ClaimUID: claimB, ResultIndex: int(inRange(int64(index), limits.MaxResultIndex))}
			s := &req.Share.Settings
			s.LimitBytes = inRange(limit, limits.MaxSwapBytes)
			if high {
				s.HighBytes = ptr(inRange(highV, s.LimitBytes))
			}
			s.Zswap = swapsettings.Zswap(zswap % 3)
			if swappy {
				v := uint64(swappyV) % (swapsettings.MaxSwappiness + 1)
				s.Swappiness = &v
			}
			if pod {
				req.PodUID = "3f2e1d0c-9b8a-4766-8554-433221100fed"
			}
			if podLimit {
				req.Share.PodLimitBytes = ptr(inRange(podLimitV, limits.MaxSwapBytes))
			}
			s.ZswapWritebackOff = writebackOff
			if offload {
				s.OffloadMaxStall = ptr(int32(inRange(int64(offloadV), swapsettings.MaxOffloadMaxStall-1) + 1))
			}
		}
		args := FormatArgs(cfg, req)
		cfg2, req2, err := ParseArgs(args)
		if err != nil {
			t.Fatalf("FormatArgs(%+v, %+v) = %q, which ParseArgs rejects: %v", cfg, req, args, err)
		}
		if !reflect.DeepEqual(cfg2, cfg) || !reflect.DeepEqual(req2, req) {
			t.Fatalf("FormatArgs(%+v, %s) = %q, which ParseArgs reads as %+v, %s", cfg, showRequest(req), args, cfg2, showRequest(req2))
		}
	})
}

// inRange maps v into 0..max.
func inRange(v, max int64) int64 {
	v %= max + 1
	if v < 0 {
		v += max + 1
	}
	return v
}

func ptr[T any](v T) *T { return &v }

// showRequest prints a request with the values behind its pointers.
func showRequest(r Request) string {
	data, _ := json.Marshal(r)
	return string(data)
}

// checkParsedArgs checks what ParseArgs promises for accepted arguments.
// It looks only at the fields that exist today: flags added later (see
// ParseArgs) do not break it, but their fields belong here, in FormatArgs
// and in diffParsed.
func checkParsedArgs(t *testing.T, args []string, cfg Config, req Request) {
	t.Helper()
	if !limits.IsUID(req.ClaimUID) {
		t.Errorf("ParseArgs(%q) accepted claim UID %q", args, req.ClaimUID)
	}
	for name, p := range map[string]string{"state dir": cfg.StateDir, "proc root": cfg.ProcRoot, "cgroup root": cfg.CgroupRoot} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			t.Errorf("ParseArgs(%q) accepted %s %q, not a clean absolute path", args, name, p)
		}
	}
	if req.PodUID != "" && !limits.IsUID(req.PodUID) {
		t.Errorf("ParseArgs(%q) accepted pod UID %q", args, req.PodUID)
	}
	if !req.Cleanup && (req.ResultIndex < 0 || req.ResultIndex > limits.MaxResultIndex) {
		t.Errorf("ParseArgs(%q) accepted result index %d", args, req.ResultIndex)
	}
	s := req.Share
	if req.Cleanup {
		if s.LimitBytes != 0 || s.HighBytes != nil || s.Zswap != swapsettings.ZswapUnchanged || s.Swappiness != nil || s.PodLimitBytes != nil || req.PodUID != "" || req.ResultIndex != -1 ||
			s.ZswapWritebackOff || s.OffloadMaxStall != nil {
			t.Errorf("ParseArgs(%q) accepted limits with --cleanup: %+v", args, req)
		}
		return
	}
	if s.PodLimitBytes != nil && (*s.PodLimitBytes < 0 || *s.PodLimitBytes > limits.MaxSwapBytes) {
		t.Errorf("ParseArgs(%q) accepted pod swap limit %d outside 0..%d", args, *s.PodLimitBytes, limits.MaxSwapBytes)
	}
	if s.LimitBytes < 0 || s.LimitBytes > limits.MaxSwapBytes {
		t.Errorf("ParseArgs(%q) accepted swap limit %d outside 0..%d", args, s.LimitBytes, limits.MaxSwapBytes)
	}
	if s.HighBytes != nil && (*s.HighBytes < 0 || *s.HighBytes > s.LimitBytes) {
		t.Errorf("ParseArgs(%q) accepted swap high %d outside 0..%d", args, *s.HighBytes, s.LimitBytes)
	}
	if s.Swappiness != nil && *s.Swappiness > 100 {
		t.Errorf("ParseArgs(%q) accepted swappiness %d", args, *s.Swappiness)
	}
	if !s.Zswap.Valid() {
		t.Errorf("ParseArgs(%q) accepted zswap %s", args, s.Zswap)
	}
	if s.OffloadMaxStall != nil && (*s.OffloadMaxStall < swapsettings.MinOffloadMaxStall || *s.OffloadMaxStall > swapsettings.MaxOffloadMaxStall) {
		t.Errorf("ParseArgs(%q) accepted offload budget %d", args, *s.OffloadMaxStall)
	}
}

// diffParsed compares the fields of two parse results that exist today;
// "" means equal.
func diffParsed(cfg1 Config, req1 Request, cfg2 Config, req2 Request) string {
	if cfg1.StateDir != cfg2.StateDir || cfg1.ProcRoot != cfg2.ProcRoot || cfg1.CgroupRoot != cfg2.CgroupRoot {
		return fmt.Sprintf("config %+v vs %+v", cfg1, cfg2)
	}
	if req1.Cleanup != req2.Cleanup || req1.ClaimUID != req2.ClaimUID || req1.ResultIndex != req2.ResultIndex || req1.PodUID != req2.PodUID {
		return fmt.Sprintf("request %+v vs %+v", req1, req2)
	}
	a, b := req1.Share, req2.Share
	if a.LimitBytes != b.LimitBytes {
		return "swap limit"
	}
	if (a.HighBytes == nil) != (b.HighBytes == nil) || a.HighBytes != nil && *a.HighBytes != *b.HighBytes {
		return "swap high"
	}
	if a.Zswap != b.Zswap {
		return "zswap"
	}
	if (a.Swappiness == nil) != (b.Swappiness == nil) || a.Swappiness != nil && *a.Swappiness != *b.Swappiness {
		return "swappiness"
	}
	if (a.PodLimitBytes == nil) != (b.PodLimitBytes == nil) || a.PodLimitBytes != nil && *a.PodLimitBytes != *b.PodLimitBytes {
		return "pod swap limit"
	}
	if a.ZswapWritebackOff != b.ZswapWritebackOff {
		return "zswap writeback"
	}
	if (a.OffloadMaxStall == nil) != (b.OffloadMaxStall == nil) || a.OffloadMaxStall != nil && *a.OffloadMaxStall != *b.OffloadMaxStall {
		return "offload budget"
	}
	return ""
}

// releasedHookArgs returns the hook arguments (without the program name)
// of the specs in internal/kubeletplugin/cdi/testdata, one spec per release.
func releasedHookArgs(tb testing.TB) [][]string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("..", "kubeletplugin", "cdi", "testdata", "*-spec.json"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(files) == 0 {
		tb.Fatal("no released spec in internal/kubeletplugin/cdi/testdata")
	}
	var out [][]string
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			tb.Fatal(err)
		}
		var spec struct {
			Devices []struct {
				ContainerEdits struct {
					Hooks []struct {
						Args []string `json:"args"`
					} `json:"hooks"`
				} `json:"containerEdits"`
			} `json:"devices"`
		}
		if err := json.Unmarshal(data, &spec); err != nil {
			tb.Fatalf("%s: %v", file, err)
		}
		for _, d := range spec.Devices {
			for _, h := range d.ContainerEdits.Hooks {
				if len(h.Args) > 1 {
					out = append(out, h.Args[1:])
				}
			}
		}
	}
	return out
}
