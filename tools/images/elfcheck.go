package main

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// elfMachines are the architectures a release may hold (Linux, 64-bit, as
// Kubernetes ships its own), with the ELF machine of their binaries.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

// knownArches lists elfMachines' architectures, for error messages.
func knownArches() string {
	var names []string
	for a := range elfMachines {
		names = append(names, a)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// checkBinaries checks that every file in dir (what compile wrote for
// arch) is a static 64-bit executable of arch's ELF machine: an image
// never carries a binary that its platform cannot run, whatever go build
// did. make test builds its release for the host's architecture only; this
// check runs on every architecture of every release (make release).
func checkBinaries(dir, arch string) error {
	want, ok := elfMachines[arch]
	if !ok {
		return fmt.Errorf("no ELF machine known for GOARCH %s (want one of %s)", arch, knownArches())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading the %s binaries: %w", arch, err)
	}
	if len(entries) == 0 {
		return fmt.Errorf("go build wrote no %s binaries into %s", arch, dir)
	}
	for _, e := range entries {
		if err := checkBinary(filepath.Join(dir, e.Name()), want); err != nil {
			return fmt.Errorf("linux/%s: %w", arch, err)
		}
	}
	return nil
}

// checkBinary checks one file with checkELF.
func checkBinary(path string, machine elf.Machine) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	defer f.Close()
	return checkELF(filepath.Base(path), f, machine)
}

// checkELF checks the binary name: an ELF executable for machine, 64-bit,
// with no interpreter and no dynamic section (TestRelease checks the
// released images' binaries with it too).
func checkELF(name string, r io.ReaderAt, machine elf.Machine) error {
	f, err := elf.NewFile(r)
	if err != nil {
		return fmt.Errorf("%s is not an ELF file: %w", name, err)
	}
	if f.Machine != machine || f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
		return fmt.Errorf("%s is a %v %v %v, want a 64-bit %v executable", name, f.Class, f.Machine, f.Type, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			return fmt.Errorf("%s is linked dynamically (%v), want a static executable", name, p.Type)
		}
	}
	return nil
}
