package heapdump

import (
	"encoding/binary"
	"errors"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// The decoders of the references that live outside the core types' slots:
// typed data (Procs, Threads, Methods, Enumerators, ...), IMEMO objects
// (environments, instruction sequences, method entries, crefs, call
// caches), method tables and generic instance variables, as gc.c's
// gc_mark_children and the types' mark functions follow them.
//
// An edge is exact when it was read from a field the layout names, or
// from a struct all of whose words that point at a live object are
// VALUEs (a method definition, an instruction sequence's body and code).
// It is conservative when a word was found by scanning memory whose
// layout rbscope does not know (the data of typed data of an unknown
// type, sized by the allocator's metadata): such a word may be a stale
// value or an integer that happens to look like a pointer. Conservative
// edges are written among the references and listed again in
// "conservative_references", so that a reader can tell them apart.

// Bounds on what one object's decoding reads, far above what Ruby makes
// (a method has hundreds of locals at most, an instruction sequence
// thousands of instructions), so that torn or hostile lengths cost little.
const (
	// maxScanBytes bounds one conservative scan of a malloc'd block.
	maxScanBytes = 64 << 10
	// maxEnvWords bounds an environment's values.
	maxEnvWords = 1 << 16
	// maxIseqWords bounds an instruction sequence's code.
	maxIseqWords = 1 << 22
	// maxIseqEntries bounds its call data, catch table and inline caches,
	// and a class's call caches for one method.
	maxIseqEntries = 1 << 20
	// maxIvars bounds one object's generic instance variables.
	maxIvars = 1 << 16
)

// word reads one word.
func (d *dumper) word(addr uint64) (uint64, error) {
	b, err := d.read(addr, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// fieldWord reads the word of a struct at base whose offset is a Layout
// field (errTorn when the build lacks the field: -1).
func (d *dumper) fieldWord(base uint64, off int64) (uint64, error) {
	if off < 0 {
		return 0, errTorn
	}
	return d.word(at(base, off))
}

// refCons adds a conservative reference if val is the start of a live
// slot.
func (d *dumper) refCons(val uint64) {
	if val != d.klass && d.live(val) {
		d.cons = append(d.cons, val)
	}
}

// scan calls add with each aligned word of b.
func scan(b []byte, add func(uint64)) {
	for i := 0; i+8 <= len(b); i += 8 {
		add(binary.LittleEndian.Uint64(b[i:]))
	}
}

// scanMem calls add with each word of the n bytes at addr, read in chunks.
func (d *dumper) scanMem(addr uint64, n uint64, add func(uint64)) error {
	if n > maxDumpElems*8 {
		return errTorn
	}
	for n >= 8 {
		k := min(n&^7, dumpChunk*8)
		b, err := d.read(addr, int(k))
		if err != nil {
			return err
		}
		scan(b, add)
		addr += k
		n -= k
	}
	return nil
}

// blockSize returns the usable size of the block the process's allocator
// returned at addr, from that allocator's own metadata (see
// internal/malloc), bounded by maxScanBytes; ok is false when the
// allocator is unknown or does not vouch for a block there.
func (d *dumper) blockSize(addr uint64) (n uint64, ok bool) {
	if d.alloc.Allocator == nil {
		return 0, false
	}
	n, ok = d.alloc.UsableSize(addr)
	return min(n, maxScanBytes), ok
}

// scanBlock adds, conservatively, every word of the malloc'd block at addr
// that points at a live object.
func (d *dumper) scanBlock(addr uint64) {
	if n, ok := d.blockSize(addr); ok {
		d.scanMem(addr, n, d.refCons) //nolint:errcheck // a block that cannot be read adds nothing
	}
}

// typeName returns the wrap_struct_name of the rb_data_type_t at addr
// ("proc", "VM/thread"), or "" when it does not look like one.
func (d *dumper) typeName(addr uint64) string {
	if n, ok := d.dataTypes[addr]; ok {
		return n
	}
	name := ""
	if addr != 0 && addr&7 == 0 {
		if p, err := d.word(at(addr, d.L.DataTypeName)); err == nil && p != 0 {
			name = d.cString(p)
		}
	}
	if len(d.dataTypes) < 1<<16 {
		d.dataTypes[addr] = name
	}
	return name
}

// cString reads a short identifier-like C string at p ("" if it is not
// one).
func (d *dumper) cString(p uint64) string {
	const maxName = 64
	var out []byte
	for len(out) < maxName {
		b, err := d.read(p+uint64(len(out)), 1)
		if err != nil {
			return ""
		}
		c := b[0]
		if c == 0 {
			return string(out)
		}
		if c < 0x21 || c > 0x7e {
			return ""
		}
		out = append(out, c)
	}
	return ""
}

// dataKinds are typed data whose struct holds only VALUEs and integers:
// every word of it that points at a live object is a reference.
var dataKinds = map[string]bool{
	"method": true, "enumerator": true, "generator": true, "yielder": true,
	"queue": true, "sized_queue": true, "arithmetic_sequence": true, "chain": true,
	"product": true, "lazy": true,
}

// data decodes a T_DATA object: its kind (written as "struct", as
// dump_all does) and its references.
func (d *dumper) data(slot []byte) {
	L := d.L
	if L.RTypedDataType < 0 || L.RTypedDataData < 0 {
		return
	}
	typePtr := le64(slot, L.RTypedDataType)
	typed, embedded := false, false
	if L.RTypedDataTypedFlag >= 0 {
		// typed_flag is 1, or 1|TYPED_DATA_EMBEDDED; an untyped RData
		// has its dfree there instead
		switch f := uint64(le64(slot, L.RTypedDataTypedFlag)); f {
		case 1, 1 | uint64(L.TypedDataEmbedded):
			typed, embedded = true, f != 1
		}
	} else {
		// No typed_flag (4.0): typed if the type names itself. Where 4.0
		// keeps its embedded flag the DWARF does not say: a type pointer
		// with flag bits in it is not decoded.
		typed = d.typeName(typePtr) != ""
	}
	if !typed {
		d.scanBlock(le64(slot, L.RTypedDataData))
		return
	}
	name := d.typeName(typePtr)
	if name != "" {
		d.strField("struct", name)
	}
	var block []byte // the data, or its first words
	dataAddr := le64(slot, L.RTypedDataData)
	if embedded { // the data starts where the data pointer would be
		block = slot[L.RTypedDataData:]
		dataAddr = 0
	}
	switch {
	case name == "proc" || name == "binding":
		// rb_proc_t and rb_binding_t begin with the struct rb_block
		if block == nil {
			b, err := d.read(dataAddr, int(max(L.ProcSize, L.ProcEP+8, L.BindingPathObj+8)))
			if err != nil {
				return
			}
			block = b
		}
		b := append([]byte(nil), block...)
		d.block(b)
		if name == "binding" && L.BindingPathObj >= 0 && int64(len(b)) >= L.BindingPathObj+8 {
			d.ref(le64(b, L.BindingPathObj))
		}
	case name == "VM/thread":
		d.thread(dataAddr)
	case name == "VM/pin_array_list" && L.PinListArray >= 0:
		size := int(max(L.PinListNext, L.PinListLen, L.PinListArray) + 8)
		b := block
		if b == nil {
			var err error
			if b, err = d.read(dataAddr, size); err != nil {
				return
			}
		}
		if len(b) < size {
			return
		}
		next, n, arr := le64(b, L.PinListNext), le64(b, L.PinListLen), le64(b, L.PinListArray)
		d.ref(next)
		if arr != 0 && n <= maxDumpElems {
			d.scanMem(arr, n*8, d.ref) //nolint:errcheck // a torn list adds what was read
		}
	case name == "weakmap":
		d.weakMap(block, dataAddr)
	case (name == "autoload" || name == "autoload_table") && dataAddr != 0:
		// A class's autoload table: an st_table of constant names (IDs)
		// to the autoload_const objects that will define them.
		for _, kv := range d.stPairsAt(dataAddr) {
			d.ref(kv[1])
		}
	case name == "random/MT" && dataAddr != 0:
		// rb_random_t begins with its seed (the default generator's
		// struct is static: no allocator sizes it for a scan).
		if seed, err := d.word(dataAddr); err == nil {
			d.ref(seed)
		}
	case dataKinds[name]:
		if block != nil {
			scan(block, d.ref)
		} else if n, ok := d.blockSize(dataAddr); ok {
			d.scanMem(dataAddr, n, d.ref) //nolint:errcheck // an unreadable struct adds nothing
		}
	default:
		if block != nil {
			scan(block, d.refCons)
		} else {
			d.scanBlock(dataAddr)
		}
	}
}

// block adds what a struct rb_block (of a Proc or Binding) holds: the
// captured self (or the Symbol or Proc it is), the code, and the
// environment its ep points into.
func (d *dumper) block(b []byte) {
	L := d.L
	if L.ProcEP < 0 || L.ProcSelf < 0 || L.ProcCode < 0 || int64(len(b)) < max(L.ProcEP, L.ProcSelf, L.ProcCode)+8 {
		return
	}
	d.ref(le64(b, L.ProcSelf)) // captured.self, or as.symbol / as.proc
	d.ref(le64(b, L.ProcCode)) // captured.code: the iseq or ifunc
	d.envOf(le64(b, L.ProcEP))
}

// envOf adds the env object of the environment whose ep is given (ep[1],
// VM_ENV_DATA_INDEX_ENV, once the environment has moved to the heap).
func (d *dumper) envOf(ep uint64) {
	if ep == 0 || ep&7 != 0 {
		return
	}
	env, err := d.word(at(ep, d.L.EnvIndexEnv*8))
	if err != nil {
		return
	}
	if s := d.slotAt(env); s != nil && d.isImemo(s, d.L.ImemoEnv) {
		d.ref(env)
	}
}

// isImemo reports whether slot holds an IMEMO of the given kind.
func (d *dumper) isImemo(slot []byte, kind int64) bool {
	flags := le64(slot, d.L.RBasicFlags)
	return flags&d.tmask == d.tImemo && kind >= 0 && d.imemoKind(flags) == kind
}

func (d *dumper) imemoKind(flags uint64) int64 {
	return int64(flags>>uint64(d.L.FlUShift)) & d.L.ImemoMask
}

// thread adds what a Thread's rb_thread_t holds (conservatively: its
// VALUE fields among pointers and native handles), its fiber-local
// storage (exactly), and the values on its VM stack (conservatively, as
// Ruby's GC marks them: every word that points at a live object).
func (d *dumper) thread(th uint64) {
	L := d.L
	d.scanMem(th, uint64(L.ThreadSize), d.refCons) //nolint:errcheck // an unreadable thread adds nothing
	ec, err := d.word(at(th, L.ThreadEC))
	if err != nil {
		return
	}
	if ec == 0 {
		return
	}
	if L.ECLocalStorage >= 0 {
		if tbl, err := d.word(at(ec, L.ECLocalStorage)); err == nil {
			switch {
			case tbl == 0:
			case L.ECLocalStorageST == 1:
				if head, err := d.read(tbl, int(L.StEntries)+8); err == nil {
					d.stEntries(append([]byte(nil), head...), false) //nolint:errcheck // a torn table adds what was read
				}
			default:
				d.idTableValues(tbl)
			}
		}
	}
	if L.ECMachineStart > 0 {
		// the execution context's VALUE fields (errinfo, the recursion
		// hashes, ...) and pointers, up to its machine registers
		d.scanMem(ec, uint64(L.ECMachineStart), d.refCons) //nolint:errcheck // as above
	}
	if L.ECStorage >= 0 {
		if w, err := d.word(at(ec, L.ECStorage)); err == nil {
			d.ref(w)
		}
	}
	for _, val := range d.v.VMStackValues(th) {
		d.refCons(val)
	}
	if L.ThreadRootFiber >= 0 && L.FiberSelf >= 0 {
		if f, err := d.word(at(th, L.ThreadRootFiber)); err == nil && f != 0 {
			if self, err := d.word(at(f, L.FiberSelf)); err == nil {
				d.ref(self)
			}
		}
	}
}

// imemoNames are the names dump_all gives the imemo types.
func (d *dumper) imemoName(kind int64) string {
	L := d.L
	for _, n := range []struct {
		v    int64
		name string
	}{
		{L.ImemoEnv, "env"}, {L.ImemoCref, "cref"}, {L.ImemoSvar, "svar"}, {L.ImemoThrowData, "throw_data"},
		{L.ImemoIfunc, "ifunc"}, {L.ImemoMemo, "memo"}, {L.ImemoMent, "ment"}, {L.ImemoIseq, "iseq"},
		{L.ImemoTmpbuf, "tmpbuf"}, {L.ImemoAST, "ast"}, {L.ImemoStrterm, "parser_strterm"},
		{L.ImemoCallinfo, "callinfo"}, {L.ImemoCallcache, "callcache"}, {L.ImemoConstcache, "constcache"},
		{L.ImemoFields, "fields"},
	} {
		if n.v >= 0 && n.v == kind {
			return n.name
		}
	}
	return ""
}

// imemo decodes an IMEMO object: its kind (written as "imemo_type", as
// dump_all does) and its references. The words of its slot are VALUEs or
// pointers to malloc'd memory for every kind; environments, method
// entries and instruction sequences hold more behind pointers.
func (d *dumper) imemo(slot []byte, flags uint64) {
	L := d.L
	kind := d.imemoKind(flags)
	if name := d.imemoName(kind); name != "" {
		d.strField("imemo_type", name)
	}
	if kind == L.ImemoTmpbuf {
		return // a buffer of the C stack's kind: not decoded
	}
	words := slot[L.RBasicFlags+8:] // every word after the flags
	if kind != L.ImemoFields && int64(len(slot)) > L.BaseSlotSize {
		words = words[:L.BaseSlotSize-L.RBasicFlags-8] // the struct; the rest of a bigger slot is stale
	}
	scan(words, d.ref)
	switch {
	case kind == L.ImemoEnv && L.EnvEnv >= 0:
		d.env(slot)
	case kind == L.ImemoMent && L.MethodDefSize > 0:
		if def := le64(slot, L.MEDef); def != 0 {
			d.scanMem(def, uint64(L.MethodDefSize), d.ref) //nolint:errcheck // an unreadable definition adds nothing
		}
	case kind == L.ImemoIseq:
		d.iseq(le64(slot, L.IseqBody))
	}
}

// env adds an environment's values and the environment it continues
// (rb_vm_env_prev_env).
func (d *dumper) env(slot []byte) {
	L := d.L
	vals, n := le64(slot, L.EnvEnv), uint64(le32(slot, L.EnvEnvSize))
	if vals != 0 && n > 0 && n <= maxEnvWords {
		d.scanMem(vals, n*8, d.ref) //nolint:errcheck // a torn environment adds what was read
	}
	ep := le64(slot, L.EnvEP)
	if ep == 0 || ep&7 != 0 {
		return
	}
	envFlags, err := d.word(at(ep, L.EnvIndexFlags*8))
	if err != nil || envFlags&uint64(L.EnvFlagLocal) != 0 {
		return
	}
	if specval, err := d.word(at(ep, L.EnvIndexSpecval*8)); err == nil {
		d.envOf(specval &^ uint64(L.EnvGuardMask)) // VM_ENV_PREV_EP
	}
}

// iseq adds what an instruction sequence's body holds: its VALUE fields
// (path, labels, parent, coverage, ...), the operands of its instructions,
// the call data (call infos and caches), the iseqs of its catch table and
// its inline storage (constant caches, once-values).
func (d *dumper) iseq(body uint64) {
	L := d.L
	if body == 0 {
		return
	}
	b, err := d.read(body, int(iseqBodyValues(L)))
	if err != nil {
		return
	}
	bd := append(d.body[:0], b...)
	d.body = bd
	scan(bd, d.ref)
	if enc, n := le64(bd, L.BodyIseqEncoded), uint64(le32(bd, L.BodyIseqSize)); enc != 0 && n > 0 && n <= maxIseqWords {
		d.scanMem(enc, n*8, d.ref) //nolint:errcheck // a torn iseq adds what was read
	}
	if L.BodyCallData >= 0 && L.CallDataSize > 0 {
		// Call infos and caches (method entries in 2.7's inline caches).
		// A cache may name a slot freed and reused since, which Ruby's
		// GC does not follow: only IMEMOs of those kinds count.
		if cd, n := le64(bd, L.BodyCallData), uint64(le32(bd, L.BodyCISize)); cd != 0 && n > 0 && n <= maxIseqEntries {
			d.scanMem(cd, n*uint64(L.CallDataSize), func(v uint64) { //nolint:errcheck // as above
				if s := d.slotAt(v); s != nil && (d.isImemo(s, L.ImemoCallinfo) || d.isImemo(s, L.ImemoCallcache) || d.isImemo(s, L.ImemoMent)) {
					d.ref(v)
				}
			})
		}
	}
	if L.BodyCatchTable >= 0 && L.CatchEntrySize > 0 {
		if ct := le64(bd, L.BodyCatchTable); ct != 0 {
			if h, err := d.read(at(ct, L.CatchTableSize), 4); err == nil {
				// The table is packed: its entries start unaligned.
				if n := uint64(binary.LittleEndian.Uint32(h)); n <= maxIseqEntries {
					d.scanMem(at(ct, L.CatchTableEntry0), n*uint64(L.CatchEntrySize), d.ref) //nolint:errcheck // as above
				}
			}
		}
	}
	if is := le64(bd, L.BodyISEntries); L.BodyISEntries >= 0 && is != 0 && L.ISEntrySize > 0 {
		var n uint64
		for _, off := range []int64{L.BodyISSize, L.BodyICSize, L.BodyISESize, L.BodyIVCSize, L.BodyICVARCSize} {
			if off >= 0 {
				n += uint64(le32(bd, off))
			}
		}
		// constant caches, once-values: VALUEs or pointers to malloc'd
		// memory
		n = min(n, maxIseqEntries)
		pos := uint64(0)
		d.scanMem(is, n*uint64(L.ISEntrySize), func(v uint64) { //nolint:errcheck // as above
			if int64(pos%uint64(L.ISEntrySize)) != L.ISEntryUnmarked {
				d.ref(v)
			}
			pos += 8
		})
	}
}

// iseqBodyValues is how much of an instruction sequence's body a dump
// reads: up to its JIT fields, which a build without a JIT does not
// allocate.
func iseqBodyValues(L *layout.Layout) int64 {
	if L.BodyJITEntry > 0 {
		return L.BodyJITEntry
	}
	return L.IseqBodySize
}

// methodTable adds the method entries of a class's method table.
func (d *dumper) methodTable(slot []byte, ext uint64) {
	L := d.L
	var tbl uint64
	switch {
	case L.RClassMTbl >= 0:
		tbl = le64(slot, L.RClassMTbl)
	case L.ClassExtMTbl >= 0 && ext != 0:
		var err error
		if tbl, err = d.word(at(ext, L.ClassExtMTbl)); err != nil {
			return
		}
	}
	d.idTableValues(tbl)
}

// classCaches adds what a class's callable method table and call-cache
// table hold: method entries and, for each, the call caches made for it.
func (d *dumper) classCaches(ext uint64) {
	L := d.L
	if ext == 0 {
		return
	}
	if L.ClassExtCallableMTbl >= 0 {
		if w, err := d.word(at(ext, L.ClassExtCallableMTbl)); err == nil {
			d.idTableValues(w)
		}
	}
	if L.ClassExtCCTbl < 0 || L.CCEntriesEntries < 0 || L.CCEntrySize <= 0 {
		return
	}
	tbl, err := d.word(at(ext, L.ClassExtCCTbl))
	if err != nil {
		return
	}
	raw, capa, ok := d.v.IDTable(tbl)
	if !ok {
		return
	}
	ccs := make([]uint64, 0, capa)
	for i := range capa {
		it := raw[i*int(L.IDItemSize):]
		if le32(it, L.IDItemKey) != 0 {
			ccs = append(ccs, le64(it, L.IDItemVal))
		}
	}
	for _, c := range ccs { // struct rb_class_cc_entries
		h, err := d.read(c, int(L.CCEntriesEntries)+8)
		if err != nil {
			continue
		}
		n := uint64(int32(le32(h, L.CCEntriesLen)))
		cme, entries := le64(h, L.CCEntriesCME), le64(h, L.CCEntriesEntries)
		d.ref(cme)
		if entries != 0 && n <= maxIseqEntries {
			d.scanMem(entries, n*uint64(L.CCEntrySize), d.ref) //nolint:errcheck // a torn table adds what was read
		}
	}
}

// idTableValues adds the values of the rb_id_table at tbl that are live
// objects.
func (d *dumper) idTableValues(tbl uint64) {
	L := d.L
	raw, capa, ok := d.v.IDTable(tbl)
	if !ok {
		return
	}
	for i := range capa {
		it := raw[i*int(L.IDItemSize):]
		if le32(it, L.IDItemKey) != 0 {
			d.ref(le64(it, L.IDItemVal))
		}
	}
}

// genericIvars reads the generic instance variables of every object that
// has them (Strings, Arrays, typed data such as a Thread's variables...):
// object -> the values.
func (d *dumper) genericIvars() map[uint64][]uint64 {
	L := d.L
	tblAddr := d.v.GenericIvarTable()
	if tblAddr == 0 {
		return nil
	}
	pairs := d.stPairs(tblAddr)
	out := make(map[uint64][]uint64, len(pairs))
	for _, p := range pairs {
		obj, rec := p[0], p[1]
		if !d.live(obj) {
			continue
		}
		if d.live(rec) { // 4.0: the record is a fields object
			out[obj] = append(out[obj], rec)
			continue
		}
		if L.GenIVNumIV < 0 || L.GenIVPtr < 0 || rec == 0 {
			continue
		}
		nb, err := d.read(at(rec, L.GenIVNumIV), 4)
		if err != nil {
			continue
		}
		n := uint64(binary.LittleEndian.Uint32(nb))
		if n > maxIvars {
			continue // a too-complex shape's table, or torn
		}
		var vals, raw []uint64
		d.scanMem(at(rec, L.GenIVPtr), n*8, func(v uint64) { //nolint:errcheck // a torn record adds what was read
			raw = append(raw, v)
			if d.live(v) {
				vals = append(vals, v)
			}
		})
		out[obj] = vals
		if uint64(len(raw)) == n && n > 0 {
			d.genIVRaw[obj] = raw // for their names (ivars.go)
		}
	}
	return out
}

// vmRoots returns what the rb_vm_t and the main ractor hold among their
// words that point at live objects (the load path, loaded features, the
// mark_object_ary of objects C code registered, special exceptions...),
// found by scanning the structs as the layout sizes them.
func (d *dumper) vmRoots() []uint64 {
	var out []uint64
	add := func(v uint64) {
		if d.live(v) {
			out = append(out, v)
		}
	}
	vm, err := d.v.VMPtr()
	if err != nil {
		return nil
	}
	L := d.L
	d.scanMem(vm, uint64(L.VMSize), add) //nolint:errcheck // what was read is kept
	// The method entries of the VM's negative and overloaded tables.
	d.refs, d.klass = d.refs[:0], 0
	if w, err := d.fieldWord(vm, L.VMNegativeCMETable); err == nil && w != 0 {
		d.idTableValues(w)
	}
	if w, err := d.fieldWord(vm, L.VMOverloadedCMETable); err == nil && w != 0 {
		for _, kv := range d.stPairsAt(w) {
			d.ref(kv[0])
			d.ref(kv[1])
		}
	}
	out = append(out, d.refs...)
	d.refs = d.refs[:0]
	if L.VMRactorMainRactor >= 0 && L.RactorSize > 0 {
		if r, err := d.word(at(vm, L.VMRactorMainRactor)); err == nil && r != 0 {
			d.scanMem(r, uint64(L.RactorSize), add) //nolint:errcheck // as above
		}
	}
	return out
}

// symbolRoots returns the global symbol table's objects: the Array of
// every symbol's String and the dynamic symbols' Hash.
func (d *dumper) symbolRoots() []uint64 {
	L := d.L
	sym := d.v.GlobalSymbols()
	if sym == 0 {
		return nil
	}
	var out []uint64
	for _, off := range []int64{L.SymbolsIDs, L.SymbolsDsymHash} {
		if off < 0 {
			continue
		}
		if w, err := d.word(at(sym, off)); err == nil {
			out = append(out, w)
		}
	}
	return out
}

// consOnly returns the conservative references that are not also exact
// ones.
func consOnly(refs, cons []uint64) []uint64 {
	if len(cons) == 0 {
		return nil
	}
	var out []uint64
	if len(refs)*len(cons) <= 4096 {
		for _, c := range cons {
			dup := false
			for _, r := range refs {
				dup = dup || r == c
			}
			for _, o := range out {
				dup = dup || o == c
			}
			if !dup {
				out = append(out, c)
			}
		}
		return out
	}
	seen := make(map[uint64]bool, len(refs)+len(cons))
	for _, r := range refs {
		seen[r] = true
	}
	for _, c := range cons {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// weakMap adds an ObjectSpace::WeakMap's keys and values as weak
// references: they do not keep the objects alive.
func (d *dumper) weakMap(block []byte, data uint64) {
	L := d.L
	off, indirect := L.WeakMapTable, true // 3.3+: the entries point at the VALUEs
	if off < 0 {
		off, indirect = L.WeakMapWmap2Obj, false
	}
	if off < 0 {
		return
	}
	var pairs [][2]uint64
	switch {
	case block == nil:
		pairs = d.stPairs(at(data, off))
	case int64(len(block)) >= off+8: // embedded in the slot
		pairs = d.stPairsAt(le64(block, off))
	}
	var words []uint64
	for _, p := range pairs {
		words = append(words, p[0], p[1])
	}
	for _, w := range words {
		if indirect {
			var err error
			if w, err = d.word(w); err != nil {
				continue
			}
		}
		if w != d.klass && d.live(w) {
			d.weak = append(d.weak, w)
		}
	}
}

// finalizers returns the finalizers ObjectSpace.define_finalizer
// registered: the values of the objspace's finalizer table (the objects
// they finalize are its keys, not held by it).
func (d *dumper) finalizers() []uint64 {
	L := d.L
	if L.ObjspaceFinalizerTable < 0 {
		return nil
	}
	os, err := d.v.Objspace()
	if err != nil {
		return nil
	}
	var vals []uint64
	for _, p := range d.stPairs(at(os, L.ObjspaceFinalizerTable)) {
		vals = append(vals, p[1])
	}
	return vals
}

// subclasses adds a class's subclasses (and the iclasses of the classes
// that include a module) as weak references: the list does not keep them.
// A list that loops ends where the walk comes back to an entry (Brent's
// method: a mark moved to the walk's place at every power of two steps);
// and the walks of the whole dump take at most d.subclassSteps steps, so
// that lists made up in a process's memory cannot hold the dump for the
// length of each list times the classes.
func (d *dumper) subclasses(ext uint64) error {
	L := d.L
	if ext == 0 || L.ClassExtSubclasses < 0 || L.SubclassKlass < 0 || L.SubclassNext < 0 {
		return nil
	}
	first, err := d.word(at(ext, L.ClassExtSubclasses))
	if err != nil {
		return nil
	}
	size := int(max(L.SubclassKlass, L.SubclassNext) + 8)
	mark, power, steps := uint64(0), 1, 0
	for e := first; e != 0 && e&7 == 0 && e != mark; {
		if d.subclassSteps <= 0 {
			return errSubclassBudget
		}
		d.subclassSteps--
		entry, err := d.read(e, size)
		if err != nil {
			return nil
		}
		if k := le64(entry, L.SubclassKlass); k != d.klass && d.live(k) { // 3.1+: the head entry has none
			d.weak = append(d.weak, k)
		}
		if steps++; steps == power {
			mark, power, steps = e, power*2, 0
		}
		e = le64(entry, L.SubclassNext)
	}
	return nil
}

// errSubclassBudget stops the subclass walks of a dump whose lists,
// together, are longer than its heap has objects.
var errSubclassBudget = errors.New("subclass lists longer than the heap has objects: the rest of them left out")

// maxGlobalList bounds the registered addresses read.
const maxGlobalList = 1 << 20

// globalList returns what the addresses C code registered with
// rb_gc_register_address hold.
func (d *dumper) globalList() []uint64 {
	L := d.L
	if L.GCListVarptr < 0 || L.GCListNext < 0 {
		return nil
	}
	var head uint64
	switch {
	case L.VMGlobalObjectList >= 0:
		vm, err := d.v.VMPtr()
		if err != nil {
			return nil
		}
		head = at(vm, L.VMGlobalObjectList)
	case L.ObjspaceGlobalList >= 0:
		os, err := d.v.Objspace()
		if err != nil {
			return nil
		}
		head = at(os, L.ObjspaceGlobalList)
	default:
		return nil
	}
	first, err := d.word(head)
	if err != nil {
		return nil
	}
	var out []uint64
	size := int(max(L.GCListVarptr, L.GCListNext) + 8)
	for e, n := first, 0; e != 0 && e&7 == 0 && n < maxGlobalList; n++ {
		entry, err := d.read(e, size)
		if err != nil {
			break
		}
		ptr, next := le64(entry, L.GCListVarptr), le64(entry, L.GCListNext)
		if v, err := d.word(ptr); err == nil {
			out = append(out, v)
		}
		e = next
	}
	return out
}
