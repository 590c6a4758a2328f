package heapdump

import "github.com/rbscope/rbscope/internal/rubyvm"

// live reports whether addr is the start of a slot holding a live object.
func (d *dumper) live(addr uint64) bool {
	if !d.v.IsHeapObject(addr) {
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
			if val, err := d.v.Word(addr); err == nil {
				vmRefs = append(vmRefs, val)
			}
		}
	}
	keep("vm", append(vmRefs, d.vmRoots()...))
	keep("global_tbl", d.v.GlobalValues())
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
func (d *dumper) machineContext(ths []rubyvm.Thread) []uint64 {
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
		ec, err := d.v.Word(at(th.Addr, L.ThreadEC))
		if err != nil || ec == 0 {
			continue
		}
		start, err := d.v.Word(at(ec, L.ECMachineStart))
		lo := (regs.SP() - regs.Arch.RedZone) &^ 7 // a leaf function's red zone
		if err != nil || start <= lo || start-lo > maxMachineStack {
			continue
		}
		d.scanMem(lo, start-lo, add) //nolint:errcheck // an unreadable stack adds what was read
	}
	return out
}
