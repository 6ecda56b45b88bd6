package hook

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
)

// argSep separates the arguments of FuzzParseArgs' input: NUL cannot occur
// inside an argv element, so every split is one the kernel could pass.
const argSep = "\x00"

func FuzzParseArgs(f *testing.F) {
	for _, args := range [][]string{
		// createRuntime, as release v0.1.0 writes it (see ParseArgs).
		{"--swap-limit=314572800", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook"},
		{"--swap-limit=104857600", "--claim-uid=" + claimB, "--state-dir=/run/dra-swap/hook", "--swap-high=83886080", "--zswap=off", "--swappiness=0"},
		{"--swap-limit=0", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook", "--zswap=on", "--swappiness=100"},
		{"--swap-limit=1125899906842624", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook", "--swap-high=1125899906842624"},
		// createRuntime, with the flags release v0.2.0 adds.
		{"--swap-limit=1073741824", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook", "--swap-high=858993459", "--zswap=off", "--swappiness=10",
			"--result-index=0", "--pod-uid=3f2e1d0c-9b8a-4766-8554-433221100fed", "--pod-swap-limit=1610612736"},
		{"--swap-limit=0", "--claim-uid=" + claimB, "--state-dir=/run/dra-swap/hook", "--result-index=9999"},
		{"--swap-limit=1", "--claim-uid=" + claimB, "--result-index=10000"},
		{"--swap-limit=1", "--claim-uid=" + claimB, "--result-index=-1"},
		{"--swap-limit=1", "--claim-uid=" + claimB, "--pod-uid=pod"},
		{"--cleanup", "--claim-uid=" + claimA, "--result-index=0"},
		// poststop.
		{"--cleanup", "--claim-uid=" + claimA, "--state-dir=/run/dra-swap/hook"},
		// The test-only flags, and the separate-value flag syntax.
		{"-swap-limit", "1048576", "-claim-uid", claimA, "--state-dir", "/run/dra-swap/hook", "--proc-root=/proc", "--cgroup-root=/sys/fs/cgroup"},
		// Rejected: out of range, unclean paths, limits with --cleanup.
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
		// What was accepted, written out in the canonical form, parses to
		// the same request.
		canonical := canonicalArgs(cfg, req)
		cfg2, req2, err := ParseArgs(canonical)
		if err != nil {
			t.Fatalf("ParseArgs(%q) accepted, but its canonical form %q is rejected: %v", args, canonical, err)
		}
		if msg := diffParsed(cfg, req, cfg2, req2); msg != "" {
			t.Fatalf("ParseArgs(%q) and its canonical form %q differ: %s", args, canonical, msg)
		}
	})
}

// checkParsedArgs checks what ParseArgs promises for accepted arguments.
// It looks only at the fields that exist today: flags added later (see
// ParseArgs) do not break it, but their fields belong here and in
// canonicalArgs and diffParsed.
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
	if req.ResultIndex < -1 || req.ResultIndex > limits.MaxResultIndex {
		t.Errorf("ParseArgs(%q) accepted result index %d", args, req.ResultIndex)
	}
	s := req.Share
	if req.Cleanup {
		if s.LimitBytes != 0 || s.HighBytes != nil || s.Zswap != nil || s.Swappiness != nil || s.PodLimitBytes != nil || req.PodUID != "" || req.ResultIndex != -1 {
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
}

// canonicalArgs writes a parsed request back as arguments, the way the
// CDI spec writer does, plus the test-only flags.
func canonicalArgs(cfg Config, req Request) []string {
	args := []string{"--claim-uid=" + req.ClaimUID, "--state-dir=" + cfg.StateDir, "--proc-root=" + cfg.ProcRoot, "--cgroup-root=" + cfg.CgroupRoot}
	if req.Cleanup {
		return append(args, "--cleanup")
	}
	s := req.Share
	args = append(args, "--swap-limit="+strconv.FormatInt(s.LimitBytes, 10))
	if s.HighBytes != nil {
		args = append(args, "--swap-high="+strconv.FormatInt(*s.HighBytes, 10))
	}
	if s.Zswap != nil {
		args = append(args, "--zswap="+map[bool]string{true: "on", false: "off"}[*s.Zswap])
	}
	if s.Swappiness != nil {
		args = append(args, "--swappiness="+strconv.FormatUint(*s.Swappiness, 10))
	}
	if req.ResultIndex >= 0 {
		args = append(args, "--result-index="+strconv.Itoa(req.ResultIndex))
	}
	if req.PodUID != "" {
		args = append(args, "--pod-uid="+req.PodUID)
	}
	if s.PodLimitBytes != nil {
		args = append(args, "--pod-swap-limit="+strconv.FormatInt(*s.PodLimitBytes, 10))
	}
	return args
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
	if (a.Zswap == nil) != (b.Zswap == nil) || a.Zswap != nil && *a.Zswap != *b.Zswap {
		return "zswap"
	}
	if (a.Swappiness == nil) != (b.Swappiness == nil) || a.Swappiness != nil && *a.Swappiness != *b.Swappiness {
		return "swappiness"
	}
	if (a.PodLimitBytes == nil) != (b.PodLimitBytes == nil) || a.PodLimitBytes != nil && *a.PodLimitBytes != *b.PodLimitBytes {
		return "pod swap limit"
	}
	return ""
}

// releasedHookArgs returns the hook arguments (without the program name)
// of the specs in internal/cdi/testdata, one spec per release.
func releasedHookArgs(tb testing.TB) [][]string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("..", "cdi", "testdata", "*-spec.json"))
	if err != nil {
		tb.Fatal(err)
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
