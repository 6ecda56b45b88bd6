package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// fakeELF is the smallest ELF file debug/elf reads: a header for machine,
// class and type, and one program header of progType (0: none).
func fakeELF(t *testing.T, machine elf.Machine, class elf.Class, typ elf.Type, progType elf.ProgType) []byte {
	t.Helper()
	var buf bytes.Buffer
	h := elf.Header64{
		Type:      uint16(typ),
		Machine:   uint16(machine),
		Version:   uint32(elf.EV_CURRENT),
		Ehsize:    64,
		Phentsize: 56,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(class)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	if progType != 0 {
		h.Phoff, h.Phnum = 64, 1
	}
	if err := binary.Write(&buf, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	if progType != 0 {
		if err := binary.Write(&buf, binary.LittleEndian, elf.Prog64{Type: uint32(progType)}); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestCheckBinaries(t *testing.T) {
	static := func(m elf.Machine) func(*testing.T) []byte {
		return func(t *testing.T) []byte { return fakeELF(t, m, elf.ELFCLASS64, elf.ET_EXEC, elf.PT_LOAD) }
	}
	tests := []struct {
		name    string
		arch    string
		files   map[string]func(*testing.T) []byte
		wantErr string
	}{
		{name: "amd64 binaries", arch: "amd64", files: map[string]func(*testing.T) []byte{"a": static(elf.EM_X86_64), "b": static(elf.EM_X86_64)}},
		{name: "arm64 binaries", arch: "arm64", files: map[string]func(*testing.T) []byte{"a": static(elf.EM_AARCH64)}},
		{name: "an arm64 binary among amd64's", arch: "amd64", files: map[string]func(*testing.T) []byte{"a": static(elf.EM_X86_64), "b": static(elf.EM_AARCH64)},
			wantErr: "linux/amd64: b is a ELFCLASS64 EM_AARCH64 ET_EXEC, want a 64-bit EM_X86_64 executable"},
		{name: "an amd64 binary for arm64", arch: "arm64", files: map[string]func(*testing.T) []byte{"a": static(elf.EM_X86_64)},
			wantErr: "want a 64-bit EM_AARCH64 executable"},
		{name: "32-bit", arch: "amd64", files: map[string]func(*testing.T) []byte{"a": func(t *testing.T) []byte {
			return fakeELF(t, elf.EM_X86_64, elf.ELFCLASS32, elf.ET_EXEC, 0)
		}}, wantErr: "a is a ELFCLASS32 EM_X86_64 ET_EXEC, want a 64-bit EM_X86_64 executable"},
		{name: "position-independent", arch: "amd64", files: map[string]func(*testing.T) []byte{"a": func(t *testing.T) []byte {
			return fakeELF(t, elf.EM_X86_64, elf.ELFCLASS64, elf.ET_DYN, 0)
		}}, wantErr: "ET_DYN, want a 64-bit EM_X86_64 executable"},
		{name: "dynamically linked", arch: "amd64", files: map[string]func(*testing.T) []byte{"a": func(t *testing.T) []byte {
			return fakeELF(t, elf.EM_X86_64, elf.ELFCLASS64, elf.ET_EXEC, elf.PT_INTERP)
		}}, wantErr: "a is linked dynamically (PT_INTERP), want a static executable"},
		{name: "not ELF", arch: "amd64", files: map[string]func(*testing.T) []byte{"a": func(*testing.T) []byte { return []byte("#!/bin/sh\n") }},
			wantErr: "a is not an ELF file"},
		{name: "nothing built", arch: "amd64", wantErr: "go build wrote no amd64 binaries"},
		{name: "an architecture without a known machine", arch: "mips", files: map[string]func(*testing.T) []byte{"a": static(elf.EM_MIPS)},
			wantErr: "no ELF machine known for GOARCH mips (want one of amd64, arm64, ppc64le, riscv64, s390x)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), content(t), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			err := checkBinaries(dir, tc.arch)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("checkBinaries: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("checkBinaries: %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}

// TestBuildChecksBinaries: a build whose compiler wrote another
// architecture's binary for one of the release's fails, naming it, and
// leaves no layout.
func TestBuildChecksBinaries(t *testing.T) {
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_X86_64} // arm64's is wrong
	fake := func(_ context.Context, dir, arch, _ string, pkgs []string, _ io.Writer) error {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, p := range pkgs {
			if err := os.WriteFile(filepath.Join(dir, path.Base(p)), fakeELF(t, machines[arch], elf.ELFCLASS64, elf.ET_EXEC, elf.PT_LOAD), 0o755); err != nil {
				return err
			}
		}
		return nil
	}
	out := filepath.Join(t.TempDir(), "layout")
	o := buildOptions{out: out, set: setDriver, version: "0.1.0", revision: testRevision, arches: []string{"amd64", "arm64"}, index: true, compile: fake}
	specs, err := imageSpecs(o)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = build(t.Context(), o, specs, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "linux/arm64: dra-swap-") || !strings.Contains(err.Error(), "want a 64-bit EM_AARCH64 executable") {
		t.Fatalf("build with an amd64 binary for arm64: %v, want the arm64 binary refused", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed build left %s (stat: %v)", out, err)
	}
	// With the right machine, the same build passes the check.
	machines["arm64"] = elf.EM_AARCH64
	if err := build(t.Context(), o, specs, &stdout, &stderr); err != nil {
		t.Errorf("build with each architecture's binaries: %v", err)
	}
}
