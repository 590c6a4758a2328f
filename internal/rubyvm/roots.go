package rubyvm

import "encoding/binary"

// What Ruby's GC roots hold, as far as they can be read from outside:
// the global variables, the generic instance variables' table, a
// thread's VM stack; and the static tables they lie in, located (see
// locate.go) before a process is paused.

// maxGenericTbl bounds the entries of the generic instance variables'
// table that plausibleGenericTbl accepts.
const maxGenericTbl = 1 << 26

// maxVMStackScan bounds the bytes of one VM stack scanned for roots.
const maxVMStackScan = 64 << 20

// VMStackValues returns the words of a thread's VM stack that look like
// heap objects: the value stack below the innermost frame's sp and the
// control frames. The caller keeps those that are live objects.
func (v *VM) VMStackValues(th uint64) []uint64 {
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
			if w := binary.LittleEndian.Uint64(b[i:]); v.IsHeapObject(w) {
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

// GlobalValues returns the values of the global variables: what each
// entry's data holds, and what it points at (for variables bound to a C
// global); the caller keeps those that are live objects.
func (v *VM) GlobalValues() []uint64 {
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

// PrepareHeapDump finds, before the process is paused, what a heap dump
// (internal/rubyvm/heapdump) would otherwise look for (by reading machine
// code) while it is: the global variable table, the global symbols and
// the generic instance variables' table.
func (v *VM) PrepareHeapDump() {
	v.findGlobalTbl()
	v.GlobalSymbols()
	v.locate("generic_iv_tbl_")
}

// genericIvarTables are the names of the table of generic instance
// variables (variable.c) over the versions: object -> its ivars.
var genericIvarTables = []string{"generic_iv_tbl_", "generic_iv_tbl", "generic_fields_tbl_"}

// plausibleGenericTbl checks that c holds a pointer to a non-empty
// st_table whose first entries map heap objects to non-NULL records.
func (v *VM) plausibleGenericTbl(c uint64) bool {
	L := v.Layout
	tbl, err := v.m.u64(c)
	if err != nil || tbl == 0 || tbl&7 != 0 {
		return false
	}
	head, err := v.m.read(tbl, int(L.StEntries)+8)
	if err != nil {
		return false
	}
	num, start, bound := le64(head, L.StNumEntries), le64(head, L.StEntriesStart), le64(head, L.StEntriesBound)
	entries := le64(head, L.StEntries)
	if num == 0 || bound < start || num > bound-start || bound-start > maxGenericTbl || entries == 0 {
		return false
	}
	checked := 0
	for i := start; i < bound && checked < 4; i++ {
		e, err := v.m.read(entries+i*uint64(L.StEntrySize), int(L.StEntrySize))
		if err != nil {
			return false
		}
		if le64(e, L.StEntryHash) == ^uint64(0) {
			continue
		}
		key, rec := le64(e, L.StEntryKey), le64(e, L.StEntryRecord)
		if !v.IsHeapObject(key) || rec == 0 || rec&7 != 0 {
			return false
		}
		if _, _, err := v.objType(key); err != nil {
			return false
		}
		checked++
	}
	return checked > 0
}

// GenericIvarTable returns the address of the variable that holds the
// table of generic instance variables (variable.c: object -> its ivars,
// for Strings, Arrays, typed data...), or 0. It is a static variable,
// found through the symbols or, in a stripped build, through the code of
// the exported functions that look it up.
func (v *VM) GenericIvarTable() uint64 {
	tblAddr := v.locate("generic_iv_tbl_")
	for _, name := range genericIvarTables[1:] {
		if tblAddr != 0 {
			break
		}
		if a, _, err := v.Symbol(name); err == nil {
			tblAddr = a
		}
	}
	return tblAddr
}
