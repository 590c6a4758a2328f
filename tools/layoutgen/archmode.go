package main

import (
	"debug/elf"
	"fmt"
	"sort"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// archPatches are how a build for a differs from an x86_64 build of the
// same Ruby: the C library's types that Ruby's structs embed take a's
// sizes (arch.Arch.CTypes: glibc's pthread_mutex_t is 48 bytes on aarch64,
// 40 on x86_64; its jmp_buf 312 and 200). Everything else Ruby's
// configure decides is the same on both (LP64, little-endian, flonums,
// pthreads, the same coroutine context of two words).
func archPatches(a *arch.Arch) []patch {
	names := make([]string, 0, len(a.CTypes))
	for n := range a.CTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	var ps []patch
	for _, n := range names {
		t := a.CTypes[n]
		ps = append(ps, typedef(n, fmt.Sprintf("blob(%d,%d)", t.Size, t.Align),
			fmt.Sprintf("glibc's %s on %s (%d bytes)", n, a.Name, t.Size)))
	}
	return ps
}

// archLayout re-lays out the DWARF of an x86_64 debug build of Ruby
// (image, its libruby or static executable) for architecture a, and
// returns the table with the patches that had no effect.
func archLayout(image, family, version string, a *arch.Arch) (*layout.Layout, []string, error) {
	ef, err := elf.Open(image)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", image, err)
	}
	defer ef.Close()
	if ef.Machine != arch.AMD64.Machine {
		return nil, nil, fmt.Errorf("%s is for %v: the re-layout starts from an x86_64 build", image, ef.Machine)
	}
	d, err := ef.DWARF()
	if err != nil {
		return nil, nil, fmt.Errorf("%s has no DWARF (build Ruby with -g): %w", image, err)
	}
	r, err := newRelayout(d, lp64DWARF, archPatches(a))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", image, err)
	}
	r.dst = &abi{a.Name, 8}
	l, err := layout.Build(r, family, "table")
	if err != nil {
		return nil, nil, fmt.Errorf("%s re-laid out for %s: %w", image, a.Name, err)
	}
	l.Checked = version
	return l, r.unusedPatches(), nil
}

// runArch writes the table of ruby's family for architecture name, re-laid
// out from ruby's x86_64 DWARF.
func runArch(ruby, name, outDir string) error {
	a, err := archNamed(name)
	if err != nil {
		return err
	}
	family, version, image, err := describe(ruby)
	if err != nil {
		return err
	}
	l, unused, err := archLayout(image, family, version, a)
	if err != nil {
		return err
	}
	for _, p := range unused {
		return fmt.Errorf("patch not used (the DWARF has no such type): %s", p)
	}
	return writeFor(l, fmt.Sprintf("a Ruby %s x86_64 debug build's DWARF re-laid out for %s", version, a.Name), a, outDir)
}

func archNamed(name string) (*arch.Arch, error) {
	for _, a := range arch.All {
		if a.Name == name || a.GOARCH == name {
			return a, nil
		}
	}
	return nil, fmt.Errorf("-arch %q: want one of %s", name, arch.Names())
}
