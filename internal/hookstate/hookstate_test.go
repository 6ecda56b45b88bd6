package hookstate

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

const (
	claimA = "00000000-0000-4000-8000-00000000000a"
	claimB = "00000000-0000-4000-8000-00000000000b"
	podUID = "0b5e7c1a-1111-4222-8333-444455556666"
	cid    = "3f2a9c0d1e"
	group  = "/kubepods/burstable/pod1/" + cid
)

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// names lists a directory's entries.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestDir(t *testing.T) {
	tests := []struct {
		id      string
		want    string
		wantErr bool
	}{
		{id: cid, want: "/run/state/" + cid},
		{id: "a", want: "/run/state/a"},
		{id: "A_b.c-d", want: "/run/state/A_b.c-d"},
		{id: strings.Repeat("f", 128), want: "/run/state/" + strings.Repeat("f", 128)},
		{id: strings.Repeat("f", 129), wantErr: true},
		{id: "", wantErr: true},
		{id: ".", wantErr: true},
		{id: "..", wantErr: true},
		{id: "../x", wantErr: true},
		{id: "a/b", wantErr: true},
		{id: ".events", wantErr: true},
		{id: "-a", wantErr: true},
		{id: "a\x00", wantErr: true},
		{id: "a\n", wantErr: true},
	}
	for _, tc := range tests {
		got, err := Dir("/run/state", tc.id)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("Dir(%q) = %q, %v; want %q (error %v)", tc.id, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestShareKey(t *testing.T) {
	for _, tc := range []struct {
		index int
		want  string
	}{
		{0, claimA + ".0"},
		{31, claimA + ".31"},
		{limits.MaxResultIndex, claimA + ".9999"},
	} {
		key := ShareKey(claimA, tc.index)
		if key != tc.want {
			t.Errorf("ShareKey(%d) = %q, want %q", tc.index, key, tc.want)
		}
		// Every key names a file that Record writes and Sum reads.
		if err := Record(t.TempDir(), key, Share{Settings: swapsettings.Settings{LimitBytes: 1}}); err != nil {
			t.Errorf("Record(%q): %v", key, err)
		}
	}
}

func TestRecord(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		share   Share
		wantErr string
	}{
		{name: "claim UID alone", key: claimA, share: Share{Settings: swapsettings.Settings{LimitBytes: 300 << 20}}, wantErr: "is not a claim UID"},
		{name: "one result", key: claimA + ".0", share: Share{Settings: swapsettings.Settings{LimitBytes: 100 << 20, HighBytes: ptr.To[int64](80 << 20), Zswap: swapsettings.ZswapOff, Swappiness: ptr.To[uint64](0)}, PodLimitBytes: ptr.To[int64](400 << 20)}},
		{name: "largest", key: claimA + ".9999", share: Share{Settings: swapsettings.Settings{LimitBytes: limits.MaxSwapBytes, HighBytes: ptr.To(limits.MaxSwapBytes), Swappiness: ptr.To[uint64](100)}, PodLimitBytes: ptr.To(limits.MaxSwapBytes)}},
		{name: "zero", key: claimB + ".0", share: Share{}},
		{name: "empty key", key: "", wantErr: "is not a claim UID"},
		{name: "path", key: "../" + claimA, wantErr: "is not a claim UID"},
		{name: "container record", key: ContainerFile, wantErr: "is not a claim UID"},
		{name: "upper case", key: strings.ToUpper(claimA), wantErr: "is not a claim UID"},
		{name: "index too large", key: claimA + ".10000", wantErr: "is not a claim UID"},
		{name: "negative index", key: claimA + ".-1", wantErr: "is not a claim UID"},
		{name: "suffix", key: claimA + ".json", wantErr: "is not a claim UID"},
		{name: "negative limit", key: claimA + ".0", share: Share{Settings: swapsettings.Settings{LimitBytes: -1}}, wantErr: "swap limit -1 out of range"},
		{name: "limit too large", key: claimA + ".0", share: Share{Settings: swapsettings.Settings{LimitBytes: limits.MaxSwapBytes + 1}}, wantErr: "out of range"},
		{name: "high above limit", key: claimA + ".0", share: Share{Settings: swapsettings.Settings{LimitBytes: 10, HighBytes: ptr.To[int64](11)}}, wantErr: "swap high 11 out of range 0..10"},
		{name: "negative high", key: claimA + ".0", share: Share{Settings: swapsettings.Settings{LimitBytes: 10, HighBytes: ptr.To[int64](-1)}}, wantErr: "swap high"},
		{name: "swappiness", key: claimA + ".0", share: Share{Settings: swapsettings.Settings{LimitBytes: 10, Swappiness: ptr.To[uint64](101)}}, wantErr: "swappiness 101"},
		{name: "negative pod limit", key: claimA + ".0", share: Share{Settings: swapsettings.Settings{LimitBytes: 10}, PodLimitBytes: ptr.To[int64](-1)}, wantErr: "pod swap limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), cid) // created by Record
			err := Record(dir, tc.key, tc.share)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Record error = %v, want one containing %q", err, tc.wantErr)
				}
				if left := names(t, dir); len(left) > 0 {
					t.Errorf("rejected share left %q", left)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if left := names(t, dir); !slices.Equal(left, []string{tc.key}) {
				t.Errorf("directory holds %q, want only %q", left, tc.key)
			}
			data, err := os.ReadFile(filepath.Join(dir, tc.key))
			if err != nil {
				t.Fatal(err)
			}
			var got Share
			if err := json.Unmarshal(data, &got); err != nil || !reflect.DeepEqual(got, tc.share) {
				t.Errorf("recorded %s (%v), want %+v", data, err, tc.share)
			}
		})
	}
}

// TestShareFileFormat holds a share's file to the bytes that every release
// writes and reads: the hook of a new release sums the records that the
// old one wrote for the containers that still run.
func TestShareFileFormat(t *testing.T) {
	tests := []struct {
		name  string
		share Share
		file  string
	}{
		{name: "zero", share: Share{}, file: `{"swapLimit":0}`},
		{name: "limit only", share: Share{Settings: swapsettings.Settings{LimitBytes: 314572800}}, file: `{"swapLimit":314572800}`},
		{name: "every field, zswap off", share: Share{Settings: swapsettings.Settings{LimitBytes: 104857600, HighBytes: ptr.To[int64](83886080),
			Zswap: swapsettings.ZswapOff, Swappiness: ptr.To[uint64](0)}, PodLimitBytes: ptr.To[int64](419430400)},
			file: `{"swapLimit":104857600,"swapHigh":83886080,"zswap":false,"swappiness":0,"podSwapLimit":419430400}`},
		{name: "zswap on", share: Share{Settings: swapsettings.Settings{LimitBytes: 1, Zswap: swapsettings.ZswapOn}}, file: `{"swapLimit":1,"zswap":true}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), cid)
			if err := Record(dir, claimA+".0", tc.share); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(dir, claimA+".0"))
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != tc.file {
				t.Errorf("Record wrote %s, want %s", data, tc.file)
			}
			var got Share
			if err := json.Unmarshal([]byte(tc.file), &got); err != nil || !reflect.DeepEqual(got, tc.share) {
				t.Errorf("%s reads as %+v (%v), want %+v", tc.file, got, err, tc.share)
			}
		})
	}
	// An explicit null is what an unset pointer was read as.
	var got Share
	if err := json.Unmarshal([]byte(`{"swapLimit":1,"swapHigh":null,"zswap":null,"swappiness":null,"podSwapLimit":null}`), &got); err != nil ||
		!reflect.DeepEqual(got, Share{Settings: swapsettings.Settings{LimitBytes: 1}}) {
		t.Errorf("nulls read as %+v (%v), want the limit only", got, err)
	}
}

func TestRecordReplaces(t *testing.T) {
	dir := t.TempDir()
	for _, limit := range []int64{300, 100} {
		if err := Record(dir, claimA+".0", Share{Settings: swapsettings.Settings{LimitBytes: limit}}); err != nil {
			t.Fatal(err)
		}
	}
	totals, err := Sum(dir)
	if err != nil || totals.Shares != 1 || totals.Container.LimitBytes != 100 {
		t.Fatalf("Sum after replacing = %+v, %v; want one share of 100", totals, err)
	}
}

func validContainer() Container {
	return Container{ID: cid, CgroupVersion: 2, CgroupGroup: group, PodCgroupGroup: filepath.Dir(group),
		Namespace: "ns", Pod: "pod", PodUID: podUID, Name: "worker"}
}

func TestWriteContainer(t *testing.T) {
	tests := []struct {
		name    string
		change  func(c *Container)
		wantErr string
	}{
		{name: "valid"},
		{name: "cgroup v1", change: func(c *Container) { c.CgroupVersion = 1 }},
		{name: "not a pod's", change: func(c *Container) { c.Namespace, c.Pod, c.PodUID, c.Name, c.PodCgroupGroup = "", "", "", "", "" }},
		{name: "root group", change: func(c *Container) { c.CgroupGroup, c.PodCgroupGroup = "/", "" }},
		{name: "bad id", change: func(c *Container) { c.ID = "../x" }, wantErr: "not a valid container ID"},
		{name: "empty id", change: func(c *Container) { c.ID = "" }, wantErr: "not a valid container ID"},
		{name: "version 0", change: func(c *Container) { c.CgroupVersion = 0 }, wantErr: "neither 1 nor 2"},
		{name: "version 3", change: func(c *Container) { c.CgroupVersion = 3 }, wantErr: "neither 1 nor 2"},
		{name: "empty group", change: func(c *Container) { c.CgroupGroup = "" }, wantErr: "not a clean absolute path"},
		{name: "relative group", change: func(c *Container) { c.CgroupGroup = "kubepods/" + cid }, wantErr: "not a clean absolute path"},
		{name: "escaping group", change: func(c *Container) { c.CgroupGroup = "/kubepods/../../etc" }, wantErr: "not a clean absolute path"},
		{name: "dots in a name", change: func(c *Container) { c.CgroupGroup = "/kubepods/a..b" }, wantErr: "not a clean absolute path"},
		{name: "unclean group", change: func(c *Container) { c.CgroupGroup = "/kubepods//" + cid }, wantErr: "not a clean absolute path"},
		{name: "trailing slash", change: func(c *Container) { c.CgroupGroup = group + "/" }, wantErr: "not a clean absolute path"},
		{name: "NUL in group", change: func(c *Container) { c.CgroupGroup = "/kubepods/\x00" }, wantErr: "not a clean absolute path"},
		{name: "pod group not the parent", change: func(c *Container) { c.PodCgroupGroup = "/kubepods" }, wantErr: "is not the parent"},
		// crun's systemd driver: the process in the scope's "container"
		// subgroup, the pod's slice above the scope.
		{name: "crun's scope and subgroup", change: func(c *Container) {
			c.CgroupGroup, c.OuterCgroupGroup, c.PodCgroupGroup = group+"/x.scope/container", group+"/x.scope", group
		}},
		{name: "crun's scope without a pod budget", change: func(c *Container) {
			c.CgroupGroup, c.OuterCgroupGroup, c.PodCgroupGroup = group+"/x.scope/container", group+"/x.scope", ""
		}},
		{name: "outer group not the parent", change: func(c *Container) { c.OuterCgroupGroup = "/kubepods" }, wantErr: "outer cgroup \"/kubepods\" is not the parent"},
		{name: "outer group is the root", change: func(c *Container) { c.CgroupGroup, c.OuterCgroupGroup, c.PodCgroupGroup = "/"+cid, "/", "" }, wantErr: "is not the parent"},
		{name: "pod group the parent of the subgroup, not of the scope", change: func(c *Container) {
			c.CgroupGroup, c.OuterCgroupGroup, c.PodCgroupGroup = group+"/x.scope/container", group+"/x.scope", group+"/x.scope"
		}, wantErr: "is not the parent of its cgroup \"" + group + "/x.scope\""},
		{name: "pod group is the root", change: func(c *Container) { c.CgroupGroup, c.PodCgroupGroup = "/"+cid, "/" }, wantErr: "is not the parent"},
		{name: "bad pod UID", change: func(c *Container) { c.PodUID = "pod-1" }, wantErr: "not a Kubernetes UID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validContainer()
			if tc.change != nil {
				tc.change(&c)
			}
			dir := filepath.Join(t.TempDir(), c.ID)
			if c.ID == "" || strings.Contains(c.ID, "/") {
				dir = filepath.Join(t.TempDir(), cid)
			}
			err := WriteContainer(dir, c)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("WriteContainer(%+v) error = %v, want one containing %q", c, err, tc.wantErr)
				}
				if left := names(t, dir); len(left) > 0 {
					t.Errorf("rejected container left %q", left)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if left := names(t, dir); !slices.Equal(left, []string{ContainerFile}) {
				t.Errorf("directory holds %q, want only %s", left, ContainerFile)
			}
			got, err := ReadContainer(dir)
			if err != nil || got != c {
				t.Fatalf("ReadContainer = %+v, %v; want %+v", got, err, c)
			}
		})
	}
}

func TestReadContainer(t *testing.T) {
	valid, err := json.Marshal(validContainer())
	if err != nil {
		t.Fatal(err)
	}
	padded := func(n int) string { return string(valid) + strings.Repeat(" ", n-len(valid)) }
	tests := []struct {
		name    string
		dir     string // the directory's name; cid when empty
		content *string
		wantErr string
	}{
		{name: "valid", content: ptr.To(string(valid))},
		{name: "largest", content: ptr.To(padded(maxFileBytes))},
		{name: "minimal", content: ptr.To(`{"id":"` + cid + `","cgroupVersion":1,"cgroupGroup":"/"}`)},
		{name: "unknown fields are ignored", content: ptr.To(`{"id":"` + cid + `","cgroupVersion":2,"cgroupGroup":"/a","future":true}`)},
		{name: "missing", wantErr: "no such file"},
		{name: "oversize", content: ptr.To(padded(maxFileBytes + 1)), wantErr: "larger than"},
		{name: "empty", content: ptr.To(""), wantErr: "decode"},
		{name: "garbage", content: ptr.To("\x00{not json"), wantErr: "decode"},
		{name: "wrong type", content: ptr.To(`{"id":"` + cid + `","cgroupVersion":"2","cgroupGroup":"/a"}`), wantErr: "decode"},
		{name: "id of another container", content: ptr.To(strings.Replace(string(valid), cid, "other", 1)), wantErr: "does not match its directory"},
		{name: "directory of another container", dir: "other", content: ptr.To(string(valid)), wantErr: "does not match its directory"},
		{name: "no id", content: ptr.To(`{"cgroupVersion":2,"cgroupGroup":"/a"}`), wantErr: "does not match its directory"},
		{name: "directory not a container id", dir: ".hidden", content: ptr.To(`{"id":".hidden","cgroupVersion":2,"cgroupGroup":"/a"}`), wantErr: "not a valid container ID"},
		{name: "version", content: ptr.To(`{"id":"` + cid + `","cgroupVersion":3,"cgroupGroup":"/a"}`), wantErr: "neither 1 nor 2"},
		{name: "escaping group", content: ptr.To(`{"id":"` + cid + `","cgroupVersion":2,"cgroupGroup":"/a/../../b"}`), wantErr: "not a clean absolute path"},
		{name: "relative group", content: ptr.To(`{"id":"` + cid + `","cgroupVersion":2,"cgroupGroup":"a"}`), wantErr: "not a clean absolute path"},
		{name: "bad pod UID", content: ptr.To(`{"id":"` + cid + `","cgroupVersion":2,"cgroupGroup":"/a","podUID":"x"}`), wantErr: "not a Kubernetes UID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.dir
			if name == "" {
				name = cid
			}
			dir := filepath.Join(t.TempDir(), name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if tc.content != nil {
				writeFile(t, filepath.Join(dir, ContainerFile), *tc.content)
			}
			c, err := ReadContainer(dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReadContainer = %+v, %v; want an error containing %q", c, err, tc.wantErr)
				}
				return
			}
			if err != nil || c.ID != name || c.validate() != nil {
				t.Fatalf("ReadContainer = %+v, %v", c, err)
			}
		})
	}
	if _, err := ReadContainer(filepath.Join(t.TempDir(), cid)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadContainer of a missing directory = %v, want fs.ErrNotExist", err)
	}
}

func TestSum(t *testing.T) {
	tests := []struct {
		name    string
		shares  map[string]Share  // key -> share, written with Record
		files   map[string]string // other files, written as they are
		want    Totals
		wantErr string
	}{
		{name: "no shares", want: Totals{}},
		{name: "one share", shares: map[string]Share{claimA + ".0": {Settings: swapsettings.Settings{LimitBytes: 300}}},
			want: Totals{Container: swapsettings.Settings{LimitBytes: 300}, Shares: 1}},
		{name: "limits add up", shares: map[string]Share{claimA + ".0": {Settings: swapsettings.Settings{LimitBytes: 300}}, claimB + ".0": {Settings: swapsettings.Settings{LimitBytes: 100}}, claimB + ".1": {Settings: swapsettings.Settings{LimitBytes: 50}}},
			want: Totals{Container: swapsettings.Settings{LimitBytes: 450}, Shares: 3}},
		{name: "swap.high counts the others at their limit", shares: map[string]Share{claimA + ".0": {Settings: swapsettings.Settings{LimitBytes: 100, HighBytes: ptr.To[int64](80)}}, claimB + ".0": {Settings: swapsettings.Settings{LimitBytes: 200}}},
			want: Totals{Container: swapsettings.Settings{LimitBytes: 300, HighBytes: ptr.To[int64](280)}, Shares: 2}},
		{name: "swap.high of every share", shares: map[string]Share{claimA + ".0": {Settings: swapsettings.Settings{LimitBytes: 100, HighBytes: ptr.To[int64](80)}}, claimB + ".0": {Settings: swapsettings.Settings{LimitBytes: 200, HighBytes: ptr.To[int64](0)}}},
			want: Totals{Container: swapsettings.Settings{LimitBytes: 300, HighBytes: ptr.To[int64](80)}, Shares: 2}},
		{name: "zswap off wins, first", shares: map[string]Share{claimA + ".0": {Settings: swapsettings.Settings{Zswap: swapsettings.ZswapOff}}, claimB + ".0": {Settings: swapsettings.Settings{Zswap: swapsettings.ZswapOn}}},
			want: Totals{Container: swapsettings.Settings{Zswap: swapsettings.ZswapOff}, Shares: 2}},
		{name: "zswap off wins, last", shares: map[string]Share{claimA + ".0": {Settings: swapsettings.Settings{Zswap: swapsettings.ZswapOn}}, claimB + ".0": {Settings: swapsettings.Settings{Zswap: swapsettings.ZswapOff}}},
			want: Totals{Container: swapsettings.Settings{Zswap: swapsettings.ZswapOff}, Shares: 2}},
		{name: "zswap on when none turns it off", shares: map[string]Share{claimA + ".0": {Settings: swapsettings.Settings{Zswap: swapsettings.ZswapOn}}, claimB + ".0": {}},
			want: Totals{Container: swapsettings.Settings{Zswap: swapsettings.ZswapOn}, Shares: 2}},
		{name: "lowest swappiness", shares: map[string]Share{claimA + ".0": {Settings: swapsettings.Settings{Swappiness: ptr.To[uint64](60)}}, claimB + ".0": {Settings: swapsettings.Settings{Swappiness: ptr.To[uint64](10)}}, claimB + ".2": {}},
			want: Totals{Container: swapsettings.Settings{Swappiness: ptr.To[uint64](10)}, Shares: 3}},
		{name: "largest pod limit", shares: map[string]Share{claimA + ".0": {Settings: swapsettings.Settings{LimitBytes: 1}, PodLimitBytes: ptr.To[int64](300)}, claimB + ".0": {Settings: swapsettings.Settings{LimitBytes: 2}, PodLimitBytes: ptr.To[int64](100)}, claimB + ".1": {Settings: swapsettings.Settings{LimitBytes: 3}}},
			want: Totals{Container: swapsettings.Settings{LimitBytes: 6}, PodLimitBytes: ptr.To[int64](300), Shares: 3}},
		{name: "writeback off if any share turns it off; the lowest offload budget", shares: map[string]Share{
			claimA + ".0": {Settings: swapsettings.Settings{LimitBytes: 1, OffloadMaxStall: ptr.To[int32](50)}},
			claimB + ".0": {Settings: swapsettings.Settings{LimitBytes: 2, ZswapWritebackOff: true, OffloadMaxStall: ptr.To[int32](10)}}, claimB + ".1": {Settings: swapsettings.Settings{LimitBytes: 3}}},
			want: Totals{Container: swapsettings.Settings{LimitBytes: 6, ZswapWritebackOff: true, OffloadMaxStall: ptr.To[int32](10)}, Shares: 3}},
		{name: "offload budget 0", files: map[string]string{claimA + ".0": `{"swapLimit":1,"offloadMaxStall":0}`}, wantErr: "offload max stall"},
		{name: "largest sum", shares: map[string]Share{claimA + ".0": {Settings: swapsettings.Settings{LimitBytes: limits.MaxSwapBytes - 1}}, claimB + ".0": {Settings: swapsettings.Settings{LimitBytes: 1}}},
			want: Totals{Container: swapsettings.Settings{LimitBytes: limits.MaxSwapBytes}, Shares: 2}},
		{name: "other files are skipped", shares: map[string]Share{claimA + ".0": {Settings: swapsettings.Settings{LimitBytes: 7}}},
			files: map[string]string{ContainerFile: `{"id":"x"}`, ".tmp-123": "{partial", "README": "x", claimB + ".json": "x", claimB + ".10000": "x", strings.ToUpper(claimB): "x", claimB: "x"},
			want:  Totals{Container: swapsettings.Settings{LimitBytes: 7}, Shares: 1}},
		{name: "sum too large", shares: map[string]Share{claimA + ".0": {Settings: swapsettings.Settings{LimitBytes: limits.MaxSwapBytes}}, claimB + ".0": {Settings: swapsettings.Settings{LimitBytes: 1}}}, wantErr: "add up to more than"},
		{name: "malformed share", files: map[string]string{claimA + ".0": "{"}, wantErr: "hook state"},
		{name: "wrong type", files: map[string]string{claimA + ".0": `{"swapLimit":"1Gi"}`}, wantErr: "hook state"},
		{name: "negative limit", files: map[string]string{claimA + ".0": `{"swapLimit":-1}`}, wantErr: "out of range"},
		{name: "limit too large", files: map[string]string{claimA + ".0": `{"swapLimit":4611686018427387905}`}, wantErr: "out of range"},
		{name: "high above limit", files: map[string]string{claimA + ".0": `{"swapLimit":1,"swapHigh":2}`}, wantErr: "swap high"},
		{name: "negative high", files: map[string]string{claimA + ".0": `{"swapLimit":1,"swapHigh":-1}`}, wantErr: "swap high"},
		{name: "swappiness", files: map[string]string{claimA + ".0": `{"swapLimit":1,"swappiness":101}`}, wantErr: "swappiness"},
		{name: "negative pod limit", files: map[string]string{claimA + ".0": `{"swapLimit":1,"podSwapLimit":-5}`}, wantErr: "pod swap limit"},
		{name: "oversize share", files: map[string]string{claimA + ".0": `{"swapLimit":1}` + strings.Repeat(" ", maxFileBytes)}, wantErr: "larger than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), cid)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for key, s := range tc.shares {
				if err := Record(dir, key, s); err != nil {
					t.Fatal(err)
				}
			}
			for name, content := range tc.files {
				writeFile(t, filepath.Join(dir, name), content)
			}
			got, err := Sum(dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Sum = %+v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Sum = %s, want %s", shareString(got), shareString(tc.want))
			}
		})
	}
	if _, err := Sum(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Sum of a missing directory succeeded")
	}
}

// TestClaimLimits: each claim's part of the container's limit, its
// results' shares added up; what Sum refuses, ClaimLimits refuses too.
func TestClaimLimits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), cid)
	for key, limit := range map[string]int64{claimA + ".0": 300, claimB + ".0": 100, claimB + ".1": 50} {
		if err := Record(dir, key, Share{Settings: swapsettings.Settings{LimitBytes: limit}}); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, ContainerFile), `{"id":"x"}`)
	got, err := ClaimLimits(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{claimA: 300, claimB: 150}; !reflect.DeepEqual(got, want) {
		t.Errorf("ClaimLimits = %v, want %v", got, want)
	}
	writeFile(t, filepath.Join(dir, claimB+".2"), "{")
	if got, err := ClaimLimits(dir); err == nil {
		t.Errorf("ClaimLimits with a malformed share = %v, want an error", got)
	}
}

// shareString prints Totals with the values behind its pointers.
func shareString(t Totals) string {
	data, _ := json.Marshal(t)
	return string(data)
}

// TestShares: each recorded share by its key, validated; other files
// left out; ClaimOf names a key's claim.
func TestShares(t *testing.T) {
	dir := filepath.Join(t.TempDir(), cid)
	a := Share{Settings: swapsettings.Settings{LimitBytes: 100, OffloadMaxStall: ptr.To[int32](50)}}
	b := Share{Settings: swapsettings.Settings{LimitBytes: 200, ZswapWritebackOff: true}, PodLimitBytes: ptr.To[int64](300)}
	for key, s := range map[string]Share{claimA + ".0": a, claimB + ".1": b} {
		if err := Record(dir, key, s); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, ContainerFile), `{"id":"x"}`)
	writeFile(t, filepath.Join(dir, ".tmp-1"), "{partial")
	got, err := Shares(dir)
	if want := map[string]Share{claimA + ".0": a, claimB + ".1": b}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Shares = %+v, %v; want %+v", got, err, want)
	}
	if ClaimOf(claimB+".1") != claimB || ClaimOf(claimA) != claimA {
		t.Errorf("ClaimOf(%q) = %q, ClaimOf(%q) = %q", claimB+".1", ClaimOf(claimB+".1"), claimA, ClaimOf(claimA))
	}
	writeFile(t, filepath.Join(dir, claimB+".2"), `{"swapLimit":1,"offloadMaxStall":10001}`)
	if _, err := Shares(dir); err == nil || !strings.Contains(err.Error(), "offload max stall 10001") {
		t.Errorf("Shares with an invalid share: %v", err)
	}
	if _, err := Shares(filepath.Join(dir, "missing")); err == nil {
		t.Error("Shares of a missing directory succeeded")
	}
}

func TestList(t *testing.T) {
	state := t.TempDir()
	for _, d := range []string{cid, "a1", ".hidden", "-bad", "x..y"} {
		if err := os.MkdirAll(filepath.Join(state, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(state, "f00d"), "a file, not a container")
	writeFile(t, filepath.Join(state, ".events", "c.json"), "{}")
	if err := os.Symlink(filepath.Join(state, cid), filepath.Join(state, "link")); err != nil {
		t.Fatal(err)
	}
	ids, err := List(state)
	if want := []string{cid, "a1", "x..y"}; err != nil || !slices.Equal(ids, want) {
		t.Errorf("List = %q, %v; want %q", ids, err, want)
	}
	if ids, err := List(filepath.Join(state, "missing")); err != nil || ids != nil {
		t.Errorf("List of a missing directory = %q, %v; want none", ids, err)
	}
	if _, err := List(filepath.Join(state, "f00d")); err == nil {
		t.Error("List of a file succeeded")
	}
}

func TestRemove(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	dir, err := Dir(state, cid)
	if err != nil {
		t.Fatal(err)
	}
	if err := Record(dir, claimA+".0", Share{Settings: swapsettings.Settings{LimitBytes: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := WriteContainer(dir, validContainer()); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(filepath.Dir(state), "x")
	writeFile(t, filepath.Join(outside, "keep"), "x")
	writeFile(t, filepath.Join(state, "other", claimA+".0"), "{}")
	for _, id := range []string{"", ".", "..", "../x", "other/.."} {
		if err := Remove(state, id); err == nil {
			t.Errorf("Remove(%q) succeeded", id)
		}
	}
	if err := Remove(state, cid); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("container directory still there: %v", err)
	}
	if err := Remove(state, cid); err != nil {
		t.Errorf("Remove of a removed container: %v", err)
	}
	if err := Remove(state, "never-there"); err != nil {
		t.Errorf("Remove of an unknown container: %v", err)
	}
	if left := names(t, state); !slices.Equal(left, []string{"other"}) {
		t.Errorf("state directory holds %q, want only the other container", left)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("file outside the state directory: %v", err)
	}
}

// The pod's cgroup gets one budget, the largest that any of its
// containers' records holds; unreadable records are left out.
func TestPodSwapLimits(t *testing.T) {
	state := t.TempDir()
	record := func(id, podGroup string, limits ...int64) {
		t.Helper()
		dir := filepath.Join(state, id)
		c := Container{ID: id, CgroupVersion: 2, CgroupGroup: podGroup + "/" + id, PodCgroupGroup: podGroup}
		if err := WriteContainer(dir, c); err != nil {
			t.Fatal(err)
		}
		for i, l := range limits {
			if err := Record(dir, ShareKey(claimA, i), Share{Settings: swapsettings.Settings{LimitBytes: l}, PodLimitBytes: ptr.To(l)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const pod1, pod2, pod3 = "/kubepods/pod1", "/kubepods/pod2", "/kubepods/pod3"
	record("c1", pod1, 100)
	record("c2", pod1, 300, 200)
	record("c3", pod2, 50)
	record("c4", pod2, 70)
	writeFile(t, filepath.Join(state, "c4", ShareKey(claimB, 0)), "{half") // a record the writer left broken
	record("c5", pod3)                                                     // no budget
	if err := WriteContainer(filepath.Join(state, "c6"), Container{ID: "c6", CgroupVersion: 2, CgroupGroup: "/c6"}); err != nil {
		t.Fatal(err)
	}
	got, err := PodSwapLimits(state)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{pod1: 300, pod2: 50}; !reflect.DeepEqual(got, want) {
		t.Errorf("PodSwapLimits = %v, want %v", got, want)
	}
	for group, want := range map[string]*int64{pod1: ptr.To[int64](300), pod2: ptr.To[int64](50), pod3: nil, "": nil} {
		if got, err := PodSwapLimit(state, group); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("PodSwapLimit(%q) = %v, %v; want %v", group, ptr.Deref(got, -1), err, ptr.Deref(want, -1))
		}
	}
}

// The hook's Lock excludes the verifier's RLock, which gives up after its
// wait; readers share it.
func TestLock(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	unlock, err := Lock(state, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := RLock(state, time.Nanosecond); ok || err != nil {
		t.Fatalf("RLock while the hook holds the lock: %v, %v; want not taken", ok, err)
	}
	unlock()
	runlock, ok, err := RLock(state, time.Nanosecond)
	if !ok || err != nil {
		t.Fatalf("RLock after the hook released it: %v, %v", ok, err)
	}
	defer runlock()
	runlock2, ok, err := RLock(state, time.Nanosecond)
	if !ok || err != nil {
		t.Fatalf("second RLock: %v, %v; want shared", ok, err)
	}
	runlock2()
	if names := names(t, state); !slices.Equal(names, []string{LockFile, TurnstileFile}) {
		t.Errorf("state directory holds %v, want only the lock and its turnstile", names)
	}
	if ids, err := List(state); err != nil || len(ids) != 0 {
		t.Errorf("List = %v, %v; the lock is no container", ids, err)
	}
}

// TestLockBounded: a reader that never lets go (a verifier that hangs or
// was stopped) makes the hook's Lock fail after its wait, naming the lock,
// instead of hanging the container's start.
func TestLockBounded(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	runlock, ok, err := RLock(state, time.Nanosecond)
	if !ok || err != nil {
		t.Fatalf("RLock: %v, %v", ok, err)
	}
	defer runlock()
	done := make(chan error, 1)
	go func() {
		unlock, err := Lock(state, 20*time.Millisecond)
		if err == nil {
			unlock()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), LockFile) || !strings.Contains(err.Error(), "still held") {
			t.Errorf("Lock while a reader holds the lock: %v, want an error naming the lock as still held", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Lock still waits a minute after its 20ms wait: a stopped reader would hang every container start")
	}
}

// TestLockAheadOfReaders: readers whose holds overlap, so that the lock is
// never free (the verifier's passes back to back while many pods start),
// do not keep the hook out: once it waits, no new reader starts, and it
// gets the lock as soon as the readers already inside are done. Without
// the turnstile the hook's Lock fails "still held by a reader".
func TestLockAheadOfReaders(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	const hold = 20 * time.Millisecond
	stop := make(chan struct{})
	var readers sync.WaitGroup
	var reads atomic.Int64
	for i := range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			// Offset the second reader by half a hold, so that one of
			// them always holds the lock.
			time.Sleep(time.Duration(i) * hold / 2)
			for {
				select {
				case <-stop:
					return
				default:
				}
				runlock, ok, err := RLock(state, time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					reads.Add(1)
					time.Sleep(hold)
					runlock()
				}
			}
		}()
	}
	defer func() {
		close(stop)
		readers.Wait()
	}()
	// Let the readers get going.
	for reads.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	for i := range 5 {
		unlock, err := Lock(state, time.Second)
		if err != nil {
			t.Fatalf("Lock %d while readers take turns: %v", i, err)
		}
		// Readers are out while the hook holds the lock.
		if _, ok, err := RLock(state, time.Nanosecond); ok || err != nil {
			t.Errorf("RLock while the hook holds the lock: %v, %v; want not taken", ok, err)
		}
		unlock()
		before := reads.Load()
		for reads.Load() < before+2 {
			time.Sleep(time.Millisecond)
		}
	}
}

// WriterWaiting tells a reader that a hook holds or waits for the lock.
func TestWriterWaiting(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if WriterWaiting(state) {
		t.Error("WriterWaiting on a state directory no hook has locked")
	}
	runlock, ok, err := RLock(state, time.Nanosecond)
	if !ok || err != nil {
		t.Fatalf("RLock: %v, %v", ok, err)
	}
	if WriterWaiting(state) {
		t.Error("WriterWaiting with a reader only")
	}
	got := make(chan error, 1)
	go func() {
		unlock, err := Lock(state, time.Minute)
		if err == nil {
			unlock()
		}
		got <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !WriterWaiting(state) {
		if time.Now().After(deadline) {
			t.Fatal("WriterWaiting stayed false while a hook waited for the lock")
		}
		time.Sleep(time.Millisecond)
	}
	runlock()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if WriterWaiting(state) {
		t.Error("WriterWaiting after the hook let go")
	}
}
