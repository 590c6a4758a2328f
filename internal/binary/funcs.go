package binary

import (
	"cmp"
	"debug/elf"
	"slices"
	"sort"
	"strings"
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
// search, from the symbol tables the image's debug source chose. It reads
// the tables' entries directly, making a string only for the names asked
// for.
func (im *Image) loadFuncs() {
	im.funcs = []funcSym{}
	im.strtabs = nil
	for _, tab := range im.DebugSource().tables {
		syms, strtab, err := tab.read()
		if err != nil {
			continue
		}
		table := uint8(len(im.strtabs))
		im.strtabs = append(im.strtabs, strtab)
		im.funcs = slices.Grow(im.funcs, len(syms)/symEntry/2)
		eachSym(syms, func(s rawSym) {
			if elf.ST_TYPE(s.info) != elf.STT_FUNC || s.value == 0 || s.shndx == uint16(elf.SHN_UNDEF) {
				return
			}
			im.funcs = append(im.funcs, funcSym{s.value, s.size, s.nameOff, table, nameRank(s.info)})
		})
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
