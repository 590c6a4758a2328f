package rubyvm

import (
	"encoding/binary"
)

// maxVMStackScan bounds the bytes of one VM stack scanned for roots.
const maxVMStackScan = 64 << 20

// vmStackValues returns the words of a thread's VM stack that look like
// heap objects: the value stack below the innermost frame's sp and the
// control frames. The caller keeps those that are live objects.
func (v *VM) vmStackValues(th uint64) []uint64 {
	L := v.Layout
	ec, err := v.m.u64(at(th, L.ThreadEC))
	if err != nil {
		return nil
	}
	st, err := v.readStackBounds(ec, nil)
	if err != nil {
		return nil
	}
	var out []uint64
	scan := func(from, to uint64) {
		if to <= from || to-from > maxVMStackScan {
			return
		}
		b, err := v.m.read(from, int(to-from))
		if err != nil {
			return
		}
		for i := 0; i+8 <= len(b); i += 8 {
			if w := binary.LittleEndian.Uint64(b[i:]); v.isHeapObject(w) {
				out = append(out, w)
			}
		}
	}
	if st.cfp < st.end {
		if sp, err := v.m.u64(at(st.cfp, L.CFPSP)); err == nil && sp >= st.vmStack && sp <= st.cfp {
			scan(st.vmStack, sp)
		}
	}
	scan(st.cfp, st.end)
	return out
}

// globalValues returns the values of the global variables: what each
// entry's data holds, and what it points at (for variables bound to a C
// global); the caller keeps those that are live objects.
func (v *VM) globalValues() []uint64 {
	L := v.Layout
	tblAddr := v.findGlobalTbl()
	if tblAddr == 0 {
		return nil
	}
	items, capa, ok := v.idTableItems(tblAddr)
	if !ok {
		return nil
	}
	var out []uint64
	for i := 0; i < capa; i++ {
		it := items[i*int(L.IDItemSize):]
		if le32(it, L.IDItemKey) == 0 {
			continue
		}
		entry := le64(it, L.IDItemVal)
		gv, err := v.m.u64(at(entry, L.GlobalEntryVar))
		if err != nil || gv == 0 {
			continue
		}
		data, err := v.m.u64(at(gv, L.GlobalVarData))
		if err != nil || data == 0 {
			continue
		}
		out = append(out, data)
		if data&7 == 0 {
			if val, err := v.m.u64(data); err == nil {
				out = append(out, val)
			}
		}
	}
	return out
}

// findGlobalTbl locates rb_global_tbl (a static variable): from .symtab,
// or else from the machine code of exported functions that look global
// variables up, keeping the candidate whose entries' IDs match their keys.
// The answer is kept: the table's address does not change.
func (v *VM) findGlobalTbl() uint64 { return v.locate("rb_global_tbl") }

// PrepareHeapDump finds, before the process is paused, what HeapDump
// would otherwise look for (by reading machine code) while it is: the
// global variable table, the global symbols and the generic instance
// variables' table.
func (v *VM) PrepareHeapDump() {
	v.findGlobalTbl()
	v.globalSymbols()
	v.locate("generic_iv_tbl_")
}

// plausibleGlobalTbl checks that addr holds an rb_id_table whose first
// entries are rb_global_entry structs carrying the ID of their key.
func (v *VM) plausibleGlobalTbl(addr uint64) bool {
	L := v.Layout
	items, capa, ok := v.idTableItems(addr)
	if !ok || capa < 8 {
		return false
	}
	checked := 0
	for i := 0; i < capa && checked < 4; i++ {
		it := items[i*int(L.IDItemSize):]
		key := uint64(le32(it, L.IDItemKey))
		if key == 0 {
			continue
		}
		id, err := v.m.u64(at(le64(it, L.IDItemVal), L.GlobalEntryID))
		if err != nil {
			return false
		}
		serial := id
		if id > uint64(L.LastOpID) {
			serial = id >> uint64(L.IDScopeShift)
		}
		if serial != key {
			return false
		}
		checked++
	}
	return checked > 0
}

// live reports whether addr is the start of a slot holding a live object.
func (d *dumper) live(addr uint64) bool {
	if !d.v.isHeapObject(addr) {
		return false
	}
	slot := d.slotAt(addr)
	if slot == nil {
		return false
	}
	t := le64(slot, d.L.RBasicFlags) & d.tmask
	return t != d.tNone && t != d.tZombie && t != d.tMoved
}

// roots finds what Ruby's roots hold, as far as they can be found from
// outside; roots with nothing found are left out.
func (d *dumper) roots() []dumpRoot {
	var out []dumpRoot
	keep := func(name string, cands []uint64) {
		var refs []uint64
		for _, c := range cands {
			if d.live(c) {
				refs = append(refs, c)
			}
		}
		if len(refs) > 0 {
			out = append(out, dumpRoot{name, refs})
		}
	}
	var vmRefs []uint64
	ths, _ := d.v.ReadThreads(nil)
	for _, th := range ths {
		vmRefs = append(vmRefs, th.Self)
	}
	for _, sym := range []string{"rb_cBasicObject", "rb_cObject", "rb_mKernel"} {
		if addr, _, err := d.v.Symbol(sym); err == nil {
			if val, err := d.v.m.u64(addr); err == nil {
				vmRefs = append(vmRefs, val)
			}
		}
	}
	keep("vm", append(vmRefs, d.vmRoots()...))
	keep("global_tbl", d.v.globalValues())
	keep("global_symbols", d.symbolRoots())
	keep("finalizers", d.finalizers())
	keep("global_list", d.globalList())
	keep("machine_context", d.machineContext(ths))
	return out
}

// maxMachineStack bounds the bytes of one thread's machine stack scanned.
const maxMachineStack = 64 << 20

// machineContext returns what the threads' machine stacks (from each
// stopped thread's stack pointer, less the red zone, to the stack start
// Ruby recorded in its execution context) and registers point at among
// live objects, as Ruby's GC marks them conservatively.
func (d *dumper) machineContext(ths []Thread) []uint64 {
	L := d.L
	if !d.opt.MachineContext || L.ECMachineStart < 0 {
		return nil
	}
	var out []uint64
	seen := map[uint64]bool{}
	add := func(v uint64) {
		if !seen[v] && d.live(v) {
			seen[v] = true
			out = append(out, v)
		}
	}
	for _, th := range ths {
		regs, err := d.v.T.Registers(th.TID)
		if err != nil || regs.Arch.Machine != d.v.Image.File.Machine {
			continue // none, or an emulator's own (qemu-user's), not the program's
		}
		for _, r := range regs.Values() {
			add(r)
		}
		ec, err := d.v.m.u64(at(th.Addr, L.ThreadEC))
		if err != nil || ec == 0 {
			continue
		}
		start, err := d.v.m.u64(at(ec, L.ECMachineStart))
		lo := (regs.SP() - regs.Arch.RedZone) &^ 7 // a leaf function's red zone
		if err != nil || start <= lo || start-lo > maxMachineStack {
			continue
		}
		d.scanMem(lo, start-lo, add) //nolint:errcheck // an unreadable stack adds what was read
	}
	return out
}
