package rubyvm

import (
	"bytes"
	"debug/elf"
	"fmt"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"github.com/rbscope/rbscope/internal/target"
)

// GlobalSymbols returns the address of ruby_global_symbols, 0 when it was
// not found (C method names then show as "?").
func (v *VM) GlobalSymbols() uint64 { return v.locate("ruby_global_symbols") }

// FoundBy says how locate found a VM global.
type FoundBy int

// How locate found a VM global.
const (
	FoundBySymbol FoundBy = iota // the image's symbols name it
	FoundByCode                  // a RIP-relative operand of an exported function's code
	FoundByScan                  // a scan of the image's data (a core without the image's code)
)

// findVMPtr locates ruby_current_vm_ptr (see locators), keeping the
// candidate that points at a VM whose main thread checks out.
func (v *VM) findVMPtr() (uint64, error) {
	if addr := v.locate("ruby_current_vm_ptr"); addr != 0 {
		return addr, nil
	}
	if err := v.vmPtrLayoutError(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("Ruby %s in %s: ruby_current_vm_ptr is neither in its symbols nor found through ruby_vm_at_exit's code nor by scanning its data (or the VM is not running yet): %w", v.Version, v.Image.Path, ErrGarbage)
}

// vmPtrLayoutError tells a layout that does not fit from a VM not found:
// when the symbol, or the operand of ruby_vm_at_exit's code, gives the
// global and it points at a VM, the layout check's error on that VM names
// the field that does not hold (a patch release that moved it), refused
// as at attach. It returns nil when neither gives a VM to check.
func (v *VM) vmPtrLayoutError() error {
	var cands []uint64
	if a, _, err := v.Symbol("ruby_current_vm_ptr"); err == nil {
		cands = append(cands, a)
	} else {
		v.findRIPRef("ruby_vm_at_exit", 0, func(c uint64) (uint64, bool) {
			cands = append(cands, c)
			return 0, false
		})
	}
	saved := v.vmPtrAddr
	defer func() { v.vmPtrAddr = saved }()
	for _, c := range cands {
		vm, err := v.m.u64(c)
		if err != nil || vm == 0 || vm&7 != 0 {
			continue
		}
		if m, ok := target.FindMapping(v.maps, vm); !ok || !strings.Contains(m.Perms, "w") {
			continue
		}
		v.vmPtrAddr = c
		if err := v.sanityCheck(v.maps); err != nil {
			return v.refuseLayout(err)
		}
	}
	return nil
}

// plausibleVMPtr checks that addr holds a pointer to an rb_vm_t whose main
// thread's execution context has a VM stack in mapped memory, with its
// control frame pointer inside, and whose self is a T_DATA object that
// points back at the thread (RTypedData's data).
func (v *VM) plausibleVMPtr(addr uint64) bool {
	L := v.Layout
	vm, err := v.m.u64(addr)
	if err != nil || vm == 0 || vm&7 != 0 {
		return false
	}
	th, err := v.m.u64(at(vm, L.VMRactorMainThread))
	if err != nil || th == 0 || th&7 != 0 {
		return false
	}
	ec, err := v.m.u64(at(th, L.ThreadEC))
	if err != nil {
		return false
	}
	st, err := v.readStackBounds(ec, nil)
	if err != nil {
		return false
	}
	if _, ok := target.FindMapping(v.maps, st.vmStack); !ok {
		return false
	}
	return v.threadObjectOf(th)
}

// threadObjectOf reports whether thread th's self is a T_DATA object
// whose data pointer is th.
func (v *VM) threadObjectOf(th uint64) bool {
	L := v.Layout
	self, err := v.m.u64(at(th, L.ThreadSelf))
	if err != nil {
		return false
	}
	typ, _, err := v.objType(self)
	if err != nil || typ != L.TData {
		return false
	}
	data, err := v.m.u64(at(self, L.RTypedDataData))
	return err == nil && data == th
}

// maxDataScan bounds the bytes of the Ruby image's data that a scan reads.
const maxDataScan = 64 << 20

// scanData offers each 8-aligned word of the Ruby image's writable data
// (its writable mappings and the anonymous mapping right after the last,
// the rest of .bss) to accept, with its address, and returns the first
// address accepted.
func (v *VM) scanData(accept func(addr, word uint64) bool) (uint64, bool) {
	maps := v.maps
	var regions []target.Mapping
	for i, m := range maps {
		if strings.TrimSuffix(m.Path, " (deleted)") != v.Image.Path || !strings.Contains(m.Perms, "w") {
			continue
		}
		regions = append(regions, m)
		if i+1 < len(maps) && maps[i+1].Path == "" && maps[i+1].Start == m.End {
			regions = append(regions, maps[i+1])
		}
	}
	total := uint64(0)
	for _, m := range regions {
		size := min(m.End-m.Start, maxDataScan-total)
		total += size
		b := make([]byte, size)
		n, _ := v.T.ReadAt(b, m.Start)
		for off := 0; off+8 <= n; off += 8 {
			if a := m.Start + uint64(off); accept(a, le64(b, int64(off))) {
				return a, true
			}
		}
	}
	return 0, false
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
	start, size, err := v.Symbol(name)
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
			code, err := v.code(f.addr, size)
			if err != nil {
				continue
			}
			for pc := uint64(0); pc < uint64(len(code)); {
				inst, err := decodeX86(code[pc:])
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
	start, size, err := v.Symbol(name)
	if err != nil {
		return 0, false
	}
	if size == 0 || size > maxCodeScan {
		size = maxCodeScan
	}
	code, err := v.code(start, size)
	if err != nil {
		return 0, false
	}
	for pc := 0; pc < len(code); {
		inst, err := decodeX86(code[pc:])
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

// endbr64 opens every function of code built with -fcf-protection (the
// indirect branch tracking of Intel's CET), as Debian's and Ubuntu's
// packages are: x86asm does not know it (it decodes a REP prefix, then
// fails on the rest), and a walk that stopped there read nothing of any
// such function.
var endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}

// decodeX86 decodes the x86-64 instruction code begins with, endbr64 (a
// no-op to the walks here) included.
func decodeX86(code []byte) (x86asm.Inst, error) {
	if bytes.HasPrefix(code, endbr64) {
		return x86asm.Inst{Op: x86asm.NOP, Len: len(endbr64)}, nil
	}
	return x86asm.Decode(code, 64)
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
	saved, had := v.located["ruby_global_symbols"]
	v.located["ruby_global_symbols"] = addr
	// The first Ruby method ID registered is well known; any readable
	// name for a small ID will do as a last check.
	_, err = v.IDName(uint64(L.LastOpID+1) << uint64(L.IDScopeShift))
	if had {
		v.located["ruby_global_symbols"] = saved
	} else {
		delete(v.located, "ruby_global_symbols")
	}
	v.ids = map[uint64]string{}
	return err == nil
}
