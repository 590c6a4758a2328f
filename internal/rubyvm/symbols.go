package rubyvm

import (
	"debug/elf"
	"fmt"

	"golang.org/x/arch/x86/x86asm"

	"github.com/rbscope/rbscope/internal/target"
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
	for _, c := range v.ripRefs("rb_id2str", 2) {
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

// findVMPtr locates ruby_current_vm_ptr. Ruby 3.1 exports it; from Ruby 3.2
// on it is a hidden symbol that only .symtab names, so for a stripped
// libruby rbscope reads the machine code of the exported ruby_vm_at_exit,
// whose first act is to load it (GET_VM()), and keeps the candidate that
// points at a VM whose main thread has a VM stack in mapped memory.
func (v *VM) findVMPtr(maps []target.Mapping) (uint64, error) {
	addr, _, err := v.Image.Symbol("ruby_current_vm_ptr")
	if err == nil {
		return addr, nil
	}
	for _, c := range v.ripRefs("ruby_vm_at_exit", 0) {
		if v.plausibleVMPtr(c, maps) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("Ruby %s in %s: ruby_current_vm_ptr is neither in its symbols nor found through ruby_vm_at_exit's code (or the VM is not running yet): %w", v.Version, v.Image.Path, ErrGarbage)
}

// plausibleVMPtr checks that addr holds a pointer to an rb_vm_t whose main
// thread's execution context has a VM stack in mapped memory.
func (v *VM) plausibleVMPtr(addr uint64, maps []target.Mapping) bool {
	L := v.Layout
	vm, err := v.m.u64(addr)
	if err != nil || vm == 0 || vm&7 != 0 {
		return false
	}
	th, err := v.m.u64(at(vm, L.VMRactorMainThread))
	if err != nil || th == 0 {
		return false
	}
	ec, err := v.m.u64(at(th, L.ThreadEC))
	if err != nil {
		return false
	}
	st, err := v.readStackBounds(ec)
	if err != nil {
		return false
	}
	_, ok := target.FindMapping(maps, st.vmStack)
	return ok
}

// ripRefs returns the addresses that the machine code of the exported
// function name, and of the functions it calls or jumps to up to depth
// levels down, reads or takes through RIP-relative operands, in code order.
// It returns nothing for a machine other than x86-64.
func (v *VM) ripRefs(name string, depth int) []uint64 {
	if v.Image.File.Machine != elf.EM_X86_64 {
		return nil
	}
	start, size, err := v.Image.Symbol(name)
	if err != nil {
		return nil
	}
	seen := map[uint64]bool{}
	var refs []uint64
	var visit func(fn, size uint64, level int)
	visit = func(fn, size uint64, level int) {
		if seen[fn] || level > depth {
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
						refs = append(refs, uint64(int64(next)+a.Disp))
					}
				case x86asm.Rel:
					if inst.Op == x86asm.CALL || inst.Op == x86asm.JMP {
						visit(uint64(int64(next)+int64(a)), 0, level+1)
					}
				}
			}
			pc += uint64(inst.Len)
		}
	}
	visit(start, size, 0)
	return refs
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
