package hookstate

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

func FuzzReadContainer(f *testing.F) {
	for _, seed := range []struct{ id, data string }{
		{cid, `{"id":"` + cid + `","cgroupVersion":2,"cgroupGroup":"` + group + `","podCgroupGroup":"/kubepods/burstable/pod1","namespace":"ns","pod":"pod","podUID":"` + podUID + `","name":"worker"}`},
		{cid, `{"id":"` + cid + `","cgroupVersion":1,"cgroupGroup":"/"}`},
		{"a.b", `{"id":"a.b","cgroupVersion":2,"cgroupGroup":"/a/./b"}`},
		{cid, `{"id":"` + cid + `","cgroupVersion":2,"cgroupGroup":"/a/../../etc"}`},
		{cid, `{"id":"` + cid + `","cgroupVersion":2,"cgroupGroup":"/a","podCgroupGroup":"/"}`},
		{cid, `{"id":"other","cgroupVersion":2,"cgroupGroup":"/a"}`},
		{cid, `{"ID":"` + cid + `","CgroupVersion":2,"cgroupGroup":"/a","id":"x"}`},
		{cid, `{"id":"` + cid + `","cgroupVersion":3,"cgroupGroup":"/a","podUID":"x"}`},
		{cid, `{"id":"` + cid + `","cgroupVersion":2.5}`},
		{cid, `null`},
		{cid, ``},
		{cid, "\x00\xff"},
	} {
		f.Add(seed.id, []byte(seed.data))
	}
	f.Fuzz(func(t *testing.T, id string, data []byte) {
		if !limits.IsContainerID(id) {
			return // the directories under the state dir have such names
		}
		dir := filepath.Join(t.TempDir(), id)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ContainerFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := ReadContainer(dir)
		if err != nil {
			return
		}
		if c.ID != id {
			t.Fatalf("ReadContainer(%q) in %s = id %q", data, id, c.ID)
		}
		if c.CgroupVersion != 1 && c.CgroupVersion != 2 {
			t.Fatalf("ReadContainer(%q) = cgroup version %d", data, c.CgroupVersion)
		}
		for what, g := range map[string]string{"cgroup": c.CgroupGroup, "pod cgroup": c.PodCgroupGroup} {
			if what == "pod cgroup" && g == "" {
				continue
			}
			if !strings.HasPrefix(g, "/") || strings.Contains(g, "..") || strings.ContainsRune(g, 0) || filepath.Clean(g) != g {
				t.Fatalf("ReadContainer(%q) = %s %q, not a clean absolute path within the hierarchy", data, what, g)
			}
		}
		if c.PodCgroupGroup != "" && (c.PodCgroupGroup != filepath.Dir(c.CgroupGroup) || c.PodCgroupGroup == "/") {
			t.Fatalf("ReadContainer(%q) = pod cgroup %q for cgroup %q", data, c.PodCgroupGroup, c.CgroupGroup)
		}
		if c.PodUID != "" && !limits.IsUID(c.PodUID) {
			t.Fatalf("ReadContainer(%q) = pod UID %q", data, c.PodUID)
		}
		// What is read is written back the same.
		again := filepath.Join(t.TempDir(), id)
		if err := WriteContainer(again, c); err != nil {
			t.Fatalf("WriteContainer(%+v), read from %q: %v", c, data, err)
		}
		if back, err := ReadContainer(again); err != nil || back != c {
			t.Fatalf("ReadContainer after WriteContainer = %+v, %v; want %+v", back, err, c)
		}
	})
}

// FuzzSum writes one or two share files (of claimA and of result 0 of
// claimB) and checks that what Sum accepts is within range and follows
// its rules: the sum of the two is the combination of each alone.
func FuzzSum(f *testing.F) {
	for _, seed := range []struct {
		a, b string
		two  bool
	}{
		{`{"swapLimit":314572800}`, `{"swapLimit":104857600}`, true},
		{`{"swapLimit":104857600,"swapHigh":83886080,"zswap":false,"swappiness":0,"podSwapLimit":419430400}`, `{"swapLimit":314572800,"zswap":true,"swappiness":60,"podSwapLimit":209715200}`, true},
		{`{"swapLimit":100,"swapHigh":80}`, `{"swapLimit":200,"swapHigh":0}`, true},
		{`{"swapLimit":1125899906842624}`, `{"swapLimit":1}`, true},
		{`{"swapLimit":1125899906842624,"swapHigh":1125899906842624}`, ``, false},
		{`{"swapLimit":-1}`, `{}`, true},
		{`{"swapLimit":1,"swapHigh":2}`, `{}`, true},
		{`{"swapLimit":1,"swappiness":101}`, `{}`, true},
		{`{"swapLimit":9223372036854775807}`, `{"swapLimit":1e3}`, true},
		{`{}`, `null`, true},
		{`{"swapLimit":1}` + strings.Repeat(" ", maxFileBytes), ``, false},
		{`{`, `[]`, true},
		{`{"swapLimit":1,"zswapWritebackOff":true,"offloadMaxStall":50}`, `{"swapLimit":2,"offloadMaxStall":10}`, true},
		{`{"swapLimit":1,"offloadMaxStall":0}`, `{"swapLimit":2,"zswapWritebackOff":false}`, true},
	} {
		f.Add([]byte(seed.a), []byte(seed.b), seed.two)
	}
	keyA, keyB := ShareKey(claimA, 0), ShareKey(claimB, 0)
	f.Fuzz(func(t *testing.T, a, b []byte, two bool) {
		base := t.TempDir()
		write := func(dir string, files map[string][]byte) string {
			dir = filepath.Join(base, dir)
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for name, data := range files {
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			return dir
		}
		files := map[string][]byte{keyA: a}
		if two {
			files[keyB] = b
		}
		total, err := Sum(write("both", files))
		if err == nil {
			checkTotals(t, total, len(files))
		}
		if !two {
			return
		}
		ta, errA := Sum(write("a", map[string][]byte{keyA: a}))
		tb, errB := Sum(write("b", map[string][]byte{keyB: b}))
		if errA != nil || errB != nil {
			if err == nil {
				t.Fatalf("Sum of %q and %q = %+v, but alone they fail: %v; %v", a, b, total, errA, errB)
			}
			return
		}
		want, ok := combine(ta, tb)
		if !ok {
			if err == nil {
				t.Fatalf("Sum of %q and %q = %+v, limits beyond %d", a, b, total, limits.MaxSwapBytes)
			}
			return
		}
		if err != nil || !reflect.DeepEqual(total, want) {
			t.Fatalf("Sum of %q and %q = %s, %v; want %s", a, b, shareString(total), err, shareString(want))
		}
	})
}

// checkTotals checks that a sum of shares is one the hook can apply.
func checkTotals(t *testing.T, total Totals, shares int) {
	t.Helper()
	c := total.Container
	if total.Shares != shares {
		t.Fatalf("Sum counted %d shares, want %d", total.Shares, shares)
	}
	if c.LimitBytes < 0 || c.LimitBytes > limits.MaxSwapBytes {
		t.Fatalf("Sum = swap limit %d, outside 0..%d", c.LimitBytes, limits.MaxSwapBytes)
	}
	if c.HighBytes != nil && (*c.HighBytes < 0 || *c.HighBytes > c.LimitBytes) {
		t.Fatalf("Sum = swap high %d, outside 0..%d", *c.HighBytes, c.LimitBytes)
	}
	if c.Swappiness != nil && *c.Swappiness > 100 {
		t.Fatalf("Sum = swappiness %d", *c.Swappiness)
	}
	if !c.Zswap.Valid() {
		t.Fatalf("Sum = zswap %s", c.Zswap)
	}
	if p := total.PodLimitBytes; p != nil && (*p < 0 || *p > limits.MaxSwapBytes) {
		t.Fatalf("Sum = pod swap limit %d, outside 0..%d", *p, limits.MaxSwapBytes)
	}
	if p := c.OffloadMaxStall; p != nil && (*p < swapsettings.MinOffloadMaxStall || *p > swapsettings.MaxOffloadMaxStall) {
		t.Fatalf("Sum = offload budget %d", *p)
	}
}

// combine is Sum's documented rule for two sums of one share each; ok is
// false when the limits add up to more than MaxSwapBytes.
func combine(a, b Totals) (Totals, bool) {
	x, y := a.Container, b.Container
	if x.LimitBytes > limits.MaxSwapBytes-y.LimitBytes {
		return Totals{}, false
	}
	out := Totals{Shares: a.Shares + b.Shares}
	out.Container.LimitBytes = x.LimitBytes + y.LimitBytes
	if x.HighBytes != nil || y.HighBytes != nil {
		high := x.LimitBytes + y.LimitBytes
		if x.HighBytes != nil {
			high += *x.HighBytes - x.LimitBytes
		}
		if y.HighBytes != nil {
			high += *y.HighBytes - y.LimitBytes
		}
		out.Container.HighBytes = &high
	}
	switch {
	case x.Zswap == swapsettings.ZswapOff || y.Zswap == swapsettings.ZswapOff:
		out.Container.Zswap = swapsettings.ZswapOff
	case x.Zswap == swapsettings.ZswapOn || y.Zswap == swapsettings.ZswapOn:
		out.Container.Zswap = swapsettings.ZswapOn
	}
	out.Container.Swappiness = x.Swappiness
	if y.Swappiness != nil && (x.Swappiness == nil || *y.Swappiness < *x.Swappiness) {
		out.Container.Swappiness = y.Swappiness
	}
	out.PodLimitBytes = a.PodLimitBytes
	if b.PodLimitBytes != nil && (a.PodLimitBytes == nil || *b.PodLimitBytes > *a.PodLimitBytes) {
		out.PodLimitBytes = b.PodLimitBytes
	}
	out.Container.ZswapWritebackOff = x.ZswapWritebackOff || y.ZswapWritebackOff
	out.Container.OffloadMaxStall = x.OffloadMaxStall
	if y.OffloadMaxStall != nil && (x.OffloadMaxStall == nil || *y.OffloadMaxStall < *x.OffloadMaxStall) {
		out.Container.OffloadMaxStall = y.OffloadMaxStall
	}
	return out, true
}
