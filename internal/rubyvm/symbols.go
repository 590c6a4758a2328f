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
	found, _ := v.findRIPRef("rb_id2str", 2, func(c uint64) (uint64, bool) {
		// A candidate may point at a member of the table rather than its
		// start; try it as the start and as the address of the ids member.
		for _, base := range []uint64{c, c - uint64(v.Layout.SymbolsIDs)} {
			if v.plausibleSymbols(base) {
				return base, true
			}
		}
		return 0, false
	})
	return found
}

// globalSymbols returns the address of ruby_global_symbols, looking for it
// on first use: a stack without C methods never needs it.
func (v *VM) globalSymbols() uint64 {
	if !v.symbolsLooked {
		v.symbolsLooked = true
		v.symbolsAddr = v.findGlobalSymbols()
	}
	return v.symbolsAddr
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
	if addr, ok := v.findRIPRef("ruby_vm_at_exit", 0, func(c uint64) (uint64, bool) {
		return c, v.plausibleVMPtr(c, maps)
	}); ok {
		return addr, nil
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

// findRIPRef reads the machine code of the exported function name, then of
// the functions it calls or jumps to (breadth first, up to depth levels
// down), and offers each address taken through a RIP-relative operand to
// accept, in code order, until accept takes one. It finds nothing on a
// machine other than x86-64.
func (v *VM) findRIPRef(name string, depth int, accept func(uint64) (uint64, bool)) (uint64, bool) {
	if v.Image.File.Machine != elf.EM_X86_64 {
		return 0, false
	}
	start, size, err := v.Image.Symbol(name)
	if err != nil {
		return 0, false
	}
	type fn struct{ addr, size uint64 }
	queue := []fn{{start, size}}
	seen := map[uint64]bool{start: true}
	for level := 0; level <= depth && len(queue) > 0; level++ {
		var next []fn
		for _, f := range queue {
			size := f.size
			if size == 0 || size > maxCodeScan {
				size = maxCodeScan
			}
			code, err := v.Image.Code(f.addr, size)
			if err != nil {
				continue
			}
			for pc := uint64(0); pc < uint64(len(code)); {
				inst, err := x86asm.Decode(code[pc:], 64)
				if err != nil || inst.Len == 0 {
					break // data or padding: the function's code ended
				}
				after := f.addr + pc + uint64(inst.Len)
				pc += uint64(inst.Len)
				for _, a := range inst.Args {
					switch a := a.(type) {
					case x86asm.Mem:
						if a.Base == x86asm.RIP {
							if got, ok := accept(uint64(int64(after) + a.Disp)); ok {
								return got, true
							}
						}
					case x86asm.Rel:
						if target := uint64(int64(after) + int64(a)); (inst.Op == x86asm.CALL || inst.Op == x86asm.JMP) && !seen[target] {
							seen[target] = true
							next = append(next, fn{target, 0})
						}
					}
				}
				if inst.Op == x86asm.RET && f.size == 0 {
					break // a callee of unknown size: stop at its first return
				}
			}
		}
		queue = next
	}
	return 0, false
}

// findDispFor reads the machine code of the exported function name and
// offers each displacement of a memory operand based on a register (a
// struct member access such as GET_VM()->objspace) to accept, in code
// order, returning the first one accepted.
func (v *VM) findDispFor(name string, accept func(int64) bool) (int64, bool) {
	if v.Image.File.Machine != elf.EM_X86_64 {
		return 0, false
	}
	start, size, err := v.Image.Symbol(name)
	if err != nil {
		return 0, false
	}
	if size == 0 || size > maxCodeScan {
		size = maxCodeScan
	}
	code, err := v.Image.Code(start, size)
	if err != nil {
		return 0, false
	}
	for pc := 0; pc < len(code); {
		inst, err := x86asm.Decode(code[pc:], 64)
		if err != nil || inst.Len == 0 {
			break
		}
		pc += inst.Len
		for _, a := range inst.Args {
			if m, ok := a.(x86asm.Mem); ok && m.Base != x86asm.RIP && m.Base != 0 && m.Disp > 0 && accept(m.Disp) {
				return m.Disp, true
			}
		}
		if inst.Op == x86asm.RET {
			break
		}
	}
	return 0, false
}

// maxCodeScan bounds how much code findRIPRef reads of one function.
const maxCodeScan = 1024

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
	saved, savedLooked := v.symbolsAddr, v.symbolsLooked
	v.symbolsAddr, v.symbolsLooked = addr, true
	// The first Ruby method ID registered is well known; any readable
	// name for a small ID will do as a last check.
	_, err = v.idName(uint64(L.LastOpID+1) << uint64(L.IDScopeShift))
	v.symbolsAddr, v.symbolsLooked = saved, savedLooked
	v.ids = map[uint64]string{}
	return err == nil
}
