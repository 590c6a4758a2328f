package rubyvm

import (
	"golang.org/x/arch/x86/x86asm"
)

// findGlobalSymbols locates ruby_global_symbols, the table that maps IDs to
// names. A stripped libruby does not export it, so when .symtab is missing
// rbscope reads the machine code of the exported rb_id2str (and what it
// calls) for RIP-relative references, and keeps the first candidate that
// holds a plausible symbol table. It returns 0 when nothing fits; C method
// names then show as "?".
func (v *VM) findGlobalSymbols() uint64 {
	if addr, _, err := v.Image.Symbol("ruby_global_symbols"); err == nil {
		return addr
	}
	if v.Image.File.Machine.String() != "EM_X86_64" {
		return 0
	}
	start, size, err := v.Image.Symbol("rb_id2str")
	if err != nil {
		return 0
	}
	seen := map[uint64]bool{}
	var candidates []uint64
	var visit func(fn, size uint64, depth int)
	visit = func(fn, size uint64, depth int) {
		if seen[fn] || depth > 2 {
			return
		}
		seen[fn] = true
		if size == 0 || size > 2048 {
			size = 2048
		}
		code, err := v.Image.Code(fn, size)
		if err != nil {
			return
		}
		for pc := uint64(0); pc < uint64(len(code)); {
			inst, err := x86asm.Decode(code[pc:], 64)
			if err != nil || inst.Len == 0 {
				pc++
				continue
			}
			next := fn + pc + uint64(inst.Len)
			for _, a := range inst.Args {
				switch a := a.(type) {
				case x86asm.Mem:
					if a.Base == x86asm.RIP {
						candidates = append(candidates, uint64(int64(next)+a.Disp))
					}
				case x86asm.Rel:
					if inst.Op == x86asm.CALL || inst.Op == x86asm.JMP {
						visit(uint64(int64(next)+int64(a)), 0, depth+1)
					}
				}
			}
			pc += uint64(inst.Len)
		}
	}
	visit(start, size, 0)
	for _, c := range candidates {
		// A candidate may point at a member of the table rather than its
		// start; try it as the start and as the address of each member.
		for _, base := range []uint64{c, c - uint64(v.Layout.SymbolsIDs)} {
			if v.plausibleSymbols(base) {
				return base
			}
		}
	}
	return 0
}

// plausibleSymbols checks that addr looks like an rb_symbols_t: a serial
// count in a sane range and an ids Array whose first chunk is an Array.
func (v *VM) plausibleSymbols(addr uint64) bool {
	L := v.Layout
	last, err := v.m.u32(at(addr, L.SymbolsLastID))
	if err != nil || last < 100 || last > 1<<28 {
		return false
	}
	ids, err := v.m.u64(at(addr, L.SymbolsIDs))
	if err != nil {
		return false
	}
	chunk, err := v.rarrayEntry(ids, 0)
	if err != nil {
		return false
	}
	typ, _, err := v.objType(chunk)
	if err != nil || typ != L.TArray {
		return false
	}
	saved := v.symbolsAddr
	v.symbolsAddr = addr
	// The first Ruby method ID registered is well known; any readable
	// name for a small ID will do as a last check.
	_, err = v.idName(uint64(L.LastOpID+1) << uint64(L.IDScopeShift))
	v.symbolsAddr = saved
	v.ids = map[uint64]string{}
	return err == nil
}
