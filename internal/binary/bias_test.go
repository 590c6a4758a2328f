package binary

import (
	"debug/elf"
	"testing"

	"github.com/rbscope/rbscope/internal/target"
)

// TestLoadBias covers the three ways a Ruby image is loaded: a non-PIE
// executable (a static Ruby linked with -no-pie) at its link-time address,
// a PIE executable and a shared libruby wherever the kernel put them.
func TestLoadBias(t *testing.T) {
	load := func(off, vaddr uint64) *elf.Prog {
		return &elf.Prog{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Off: off, Vaddr: vaddr}}
	}
	sized := func(p *elf.Prog, n uint64) *elf.Prog { p.Filesz = n; return p }
	phdr := &elf.Prog{ProgHeader: elf.ProgHeader{Type: elf.PT_PHDR, Off: 0x40, Vaddr: 0x400040}}
	for _, c := range []struct {
		name  string
		typ   elf.Type
		progs []*elf.Prog
		maps  []target.Mapping
		want  uint64
	}{
		{"non-PIE executable", elf.ET_EXEC, []*elf.Prog{phdr, load(0, 0x400000), load(0x1000, 0x401000)},
			[]target.Mapping{{Start: 0x400000, End: 0x401000, Perms: "r-xp", Path: "/r/bin/ruby"}, {Start: 0x401000, End: 0x500000, Offset: 0x1000, Perms: "r-xp", Path: "/r/bin/ruby"}}, 0},
		{"PIE executable", elf.ET_DYN, []*elf.Prog{load(0, 0), load(0x1000, 0x1000)},
			[]target.Mapping{{Start: 0x55d0c0a00000, End: 0x55d0c0a01000, Perms: "r-xp", Path: "/r/bin/ruby"}, {Start: 0x55d0c0a01000, End: 0x55d0c0b00000, Offset: 0x1000, Perms: "r-xp", Path: "/r/bin/ruby"}}, 0x55d0c0a00000},
		{"shared mapping of the same file first", elf.ET_DYN, []*elf.Prog{load(0, 0)},
			[]target.Mapping{{Start: 0x7f0000000000, End: 0x7f0000100000, Perms: "r--s", Path: "/r/bin/ruby"}, {Start: 0x7f00aa000000, End: 0x7f00aa100000, Perms: "r--p", Path: "/r/bin/ruby"}}, 0x7f00aa000000},
		{"mapped twice privately (a core does not say which is shared)", elf.ET_DYN, []*elf.Prog{sized(load(0, 0), 0x33000), sized(load(0x33000, 0x33000), 0x25b000)},
			[]target.Mapping{{Start: 0x7f0000000000, End: 0x7f00003b3000, Perms: "r--p", Path: "/r/bin/ruby"},
				{Start: 0x7f00aa000000, End: 0x7f00aa033000, Perms: "r--p", Path: "/r/bin/ruby"}, {Start: 0x7f00aa033000, End: 0x7f00aa28e000, Offset: 0x33000, Perms: "r-xp", Path: "/r/bin/ruby"}}, 0x7f00aa000000},
		{"deleted shared library", elf.ET_DYN, []*elf.Prog{load(0, 0)},
			[]target.Mapping{{Start: 0x1000, End: 0x2000, Path: "/other"}, {Start: 0x7f00aa000000, End: 0x7f00aa100000, Perms: "r-xp", Path: "/r/bin/ruby (deleted)"}}, 0x7f00aa000000},
	} {
		ef := &elf.File{FileHeader: elf.FileHeader{Type: c.typ}, Progs: c.progs}
		got, err := loadBias(ef, c.maps, "/r/bin/ruby")
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: bias %#x, want %#x", c.name, got, c.want)
		}
	}
	if _, err := loadBias(&elf.File{Progs: []*elf.Prog{load(0, 0)}}, nil, "/r/bin/ruby"); err == nil {
		t.Error("an unmapped image got a load bias")
	}
}
