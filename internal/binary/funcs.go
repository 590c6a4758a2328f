package binary

import (
	"bytes"
	"cmp"
	"debug/elf"
	encbin "encoding/binary"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/xi2/xz"
)

// funcSym is one function symbol: its link-time range and its name, kept
// as an offset into its string table until it is asked for (a C library's
// table holds thousands of names, and a stack needs a few).
type funcSym struct {
	start, size uint64
	nameOff     uint32
	table       uint8 // which of Image.strtabs holds the name
	rank        int8  // nameRank
}

// maxSymbolName bounds a function name read from a string table (C++
// names run to a few hundred bytes).
const maxSymbolName = 4096

// name returns f's name from the string tables strtabs.
func (f funcSym) name(strtabs [][]byte) string {
	if int(f.table) >= len(strtabs) || int(f.nameOff) >= len(strtabs[f.table]) {
		return ""
	}
	b := strtabs[f.table][f.nameOff:]
	b = b[:min(len(b), maxSymbolName)] // a name without its NUL ends here
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// nameRank orders the names of one address: global over weak over local.
func nameRank(info byte) int8 {
	switch elf.ST_BIND(info) {
	case elf.STB_GLOBAL:
		return 2
	case elf.STB_WEAK:
		return 1
	}
	return 0
}

// loadFuncs builds the index of function symbols SymbolAt and FunctionAt
// search: from the file's .symtab and .dynsym, and for a stripped file its
// separate debug file's .symtab. It reads the tables' entries directly,
// making a string only for the names asked for.
func (im *Image) loadFuncs() {
	im.funcs = []funcSym{}
	im.strtabs = nil
	add := func(ef *elf.File, typ elf.SectionType, owner *Image) {
		sec := ef.SectionByType(typ)
		if sec == nil || !owner.symbolTableFits(typ) || int(sec.Link) >= len(ef.Sections) || ef.Class != elf.ELFCLASS64 {
			return
		}
		const entry = 24 // Elf64_Sym
		syms, err := sec.Data()
		if err != nil {
			return
		}
		strtab, err := ef.Sections[sec.Link].Data()
		if err != nil {
			return
		}
		table := uint8(len(im.strtabs))
		im.strtabs = append(im.strtabs, strtab)
		im.funcs = slices.Grow(im.funcs, len(syms)/entry/2)
		for off := entry; off+entry <= len(syms); off += entry {
			e := syms[off : off+entry]
			info, shndx := e[4], encbin.LittleEndian.Uint16(e[6:])
			value, size := encbin.LittleEndian.Uint64(e[8:]), encbin.LittleEndian.Uint64(e[16:])
			if elf.ST_TYPE(info) != elf.STT_FUNC || value == 0 || shndx == uint16(elf.SHN_UNDEF) {
				continue
			}
			im.funcs = append(im.funcs, funcSym{value, size, encbin.LittleEndian.Uint32(e[0:]), table, nameRank(info)})
		}
	}
	add(im.File, elf.SHT_SYMTAB, im)
	add(im.File, elf.SHT_DYNSYM, im)
	if im.File.SectionByType(elf.SHT_SYMTAB) == nil {
		if ef, _ := im.separateDebug(); ef != nil {
			add(ef, elf.SHT_SYMTAB, &Image{File: ef, Path: im.Path})
		} else if ef := im.miniDebugInfo(); ef != nil {
			add(ef, elf.SHT_SYMTAB, &Image{File: ef, Path: im.Path})
		}
	}
	// Several names for one address (aliases): the one searched for (the
	// last of them) is a global's, then a weak one's, then the shortest;
	// always the same one.
	slices.SortFunc(im.funcs, func(a, b funcSym) int {
		if c := cmp.Compare(a.start, b.start); c != 0 {
			return c
		}
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		an, bn := a.name(im.strtabs), b.name(im.strtabs)
		if c := cmp.Compare(len(bn), len(an)); c != 0 {
			return c
		}
		return strings.Compare(bn, an)
	})
}

// funcBefore returns the function symbol starting at or most closely
// before the run-time address addr.
func (im *Image) funcBefore(addr uint64) (funcSym, bool) {
	if im.funcs == nil {
		im.loadFuncs()
	}
	v := addr - im.Bias
	i := sort.Search(len(im.funcs), func(i int) bool { return im.funcs[i].start > v }) - 1
	if i < 0 {
		return funcSym{}, false
	}
	return im.funcs[i], true
}

// Budgets on MiniDebugInfo: the compressed section, and what it expands to.
const (
	maxMiniDebugBytes    = 8 << 20
	maxMiniDebugInflated = 32 << 20
	// maxMiniDebugDict bounds the dictionary its xz stream may ask for
	// (xz's largest preset uses 64 MB).
	maxMiniDebugDict = 64 << 20
)

// miniDebugInfo returns the ELF file a stripped file carries, xz-compressed,
// in its .gnu_debugdata section (MiniDebugInfo, as Fedora and RHEL build
// their libraries): a .symtab naming the static functions. nil when there
// is none or it is over budget.
func (im *Image) miniDebugInfo() *elf.File {
	sec := im.File.Section(".gnu_debugdata")
	if sec == nil || sec.Type == elf.SHT_NOBITS || sec.Size > maxMiniDebugBytes {
		return nil
	}
	data, err := sec.Data()
	if err != nil {
		return nil
	}
	// The stream names its dictionary's size, which the decoder allocates:
	// a few bytes may ask for gigabytes. The decoder refuses past dictMax.
	r, err := xz.NewReader(bytes.NewReader(data), maxMiniDebugDict)
	if err != nil {
		return nil
	}
	inner, err := io.ReadAll(io.LimitReader(r, maxMiniDebugInflated+1))
	if err != nil || len(inner) > maxMiniDebugInflated {
		im.Skipped = append(im.Skipped, fmt.Sprintf(".gnu_debugdata: not read (%v, or over %d bytes)", err, maxMiniDebugInflated))
		return nil
	}
	if checkHeaders(bytes.NewReader(inner)) != nil {
		return nil
	}
	ef, err := elf.NewFile(bytes.NewReader(inner))
	if err != nil {
		return nil
	}
	return ef
}
