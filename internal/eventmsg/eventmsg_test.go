package eventmsg

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	long := strings.Repeat("x", 2000)
	for _, tc := range []struct {
		name  string
		in    string
		limit int
		want  string
	}{
		{"fits", "hello", 5, "hello"},
		{"empty", "", 10, ""},
		{"ascii cut", long, NoteLimit, long[:NoteLimit-len(Marker)] + Marker},
		// "é" is 2 bytes: a cut inside it backs off to its start.
		{"rune boundary", strings.Repeat("é", 40), 40, strings.Repeat("é", 12) + Marker},
		{"4-byte runes", strings.Repeat("😀", 20), 40, strings.Repeat("😀", 6) + Marker},
		{"invalid utf-8 replaced", "a\xffb", 10, "a\uFFFDb"},
		{"invalid utf-8 counted as replaced", "ab\xff\xffcd", 5, "ab\uFFFD"},
		{"too small for the marker", "abcdefghijklmnopqrstuvwxyz0123456789", 20, "abcdefghijklmnopqrst"},
		{"zero", "abc", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Truncate(tc.in, tc.limit)
			if got != tc.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
			}
			if len(got) > tc.limit || !utf8.ValidString(got) {
				t.Errorf("Truncate(%q, %d) = %q: %d bytes, valid UTF-8 %v", tc.in, tc.limit, got, len(got), utf8.ValidString(got))
			}
		})
	}
}

func FuzzTruncate(f *testing.F) {
	f.Add(strings.Repeat("é", 600), NoteLimit)
	f.Add("short", 3)
	f.Add("a\xff\xfe\xfdb", 2)
	f.Add(strings.Repeat("😀x", 300), 31)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		if limit < 0 || limit > 4*ConditionLimit {
			return
		}
		got := Truncate(s, limit)
		valid := strings.ToValidUTF8(s, "\uFFFD")
		switch {
		case len(got) > limit:
			t.Fatalf("Truncate(%q, %d) = %q: %d bytes", s, limit, got, len(got))
		case !utf8.ValidString(got):
			t.Fatalf("Truncate(%q, %d) = %q: not UTF-8", s, limit, got)
		case len(valid) <= limit && got != valid:
			t.Fatalf("Truncate(%q, %d) = %q: cut text that fits", s, limit, got)
		case len(valid) > limit:
			kept := strings.TrimSuffix(got, Marker)
			if limit >= 2*len(Marker) && kept == got {
				t.Fatalf("Truncate(%q, %d) = %q: no marker", s, limit, got)
			}
			if !strings.HasPrefix(valid, kept) {
				t.Fatalf("Truncate(%q, %d) = %q: not a prefix", s, limit, got)
			}
			// The cut is as late as the rune boundaries allow.
			if r, size := utf8.DecodeRuneInString(valid[len(kept):]); len(got)-len(kept)+len(kept)+size <= limit && r != utf8.RuneError {
				t.Fatalf("Truncate(%q, %d) = %q: rune %q would still fit", s, limit, got, r)
			}
		}
	})
}

func TestList(t *testing.T) {
	nodes := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("node worker-%02d: offers 4Gi of swap in all", i))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		items []string
		most  int
		limit int
		want  string
	}{
		{"none", nil, 3, 100, ""},
		{"all fit", []string{"a", "b"}, 3, 100, "a; b"},
		{"most", []string{"a", "b", "c", "d", "e"}, 3, 100, "a; b; c; … and 2 more"},
		{"any number", []string{"a", "b", "c", "d", "e"}, 0, 100, "a; b; c; d; e"},
		{"bytes", nodes(40), 10, 200,
			"node worker-00: offers 4Gi of swap in all; node worker-01: offers 4Gi of swap in all; node worker-02: offers 4Gi of swap in all; " +
				"node worker-03: offers 4Gi of swap in all; … and 36 more"},
		{"last item fits without a summary", []string{"aaaa", "bbbb"}, 0, 10, "aaaa; bbbb"},
		{"first item cut", []string{strings.Repeat("y", 100), "b", "c"}, 0, 60, strings.Repeat("y", 60-len("; … and 2 more")-len(Marker)) + Marker + "; … and 2 more"},
		{"no room for any", []string{"abcdefghijklmnopqrstuvwxyz", "b"}, 0, 20, "… and 2 more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := List(tc.items, "; ", tc.most, tc.limit)
			if got != tc.want {
				t.Errorf("List = %q, want %q", got, tc.want)
			}
			if len(got) > tc.limit {
				t.Errorf("List = %d bytes, limit %d", len(got), tc.limit)
			}
		})
	}
}

func FuzzList(f *testing.F) {
	f.Add("node a: tainted", 40, 5, 900)
	f.Add(strings.Repeat("é", 300), 3, 0, 64)
	f.Fuzz(func(t *testing.T, item string, n, most, limit int) {
		if n < 0 || n > 200 || limit < 0 || limit > ConditionLimit {
			return
		}
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprintf("%d %s", i, item)
		}
		got := List(items, "; ", most, limit)
		if len(got) > limit || !utf8.ValidString(got) {
			t.Fatalf("List(%d × %q, %d, %d) = %q: %d bytes", n, item, most, limit, got, len(got))
		}
	})
}
