package rubyvm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/malloc"
	"github.com/rbscope/rbscope/internal/rubyvm/layout"
	"github.com/rbscope/rbscope/internal/target"
)

// Limits that keep a dump of changing or corrupt memory finite.
const (
	// maxDumpElems bounds the elements of one Array, Struct, object or
	// table read for references: 1<<26 VALUEs are half a gigabyte.
	maxDumpElems = 1 << 26
	// maxDumpString bounds the bytes of one String read for its value.
	maxDumpString = 1 << 30
	// dumpChunk is how many words are read at a time from a large buffer.
	dumpChunk = 8192
	// dumpFlush is how much JSON is collected before it is written.
	dumpFlush = 256 << 10
)

// errTorn marks an object whose memory does not hold together (a length
// beyond its buffer, an unreadable buffer): it is skipped and counted.
var errTorn = errors.New("torn object")

// DumpOptions tune HeapDump.
type DumpOptions struct {
	// Progress, when set, is called after each heap page with the number
	// of pages walked and the total.
	Progress func(done, total int)
	// RedactStrings leaves out every String's value (its bytesize and
	// encoding stay), for a dump that leaves the machine. Symbols keep
	// their names.
	RedactStrings bool
	// MachineContext makes the machine_context root hold what each
	// thread's machine stack and registers (the target's: a core's, a
	// snapshot's) point at, as Ruby's GC scans them. Without it that root
	// is left out.
	MachineContext bool
	// failDecode, when set (by tests), makes the decoding of the object
	// at an address for which it returns true fail as a decoder bug would.
	failDecode func(addr uint64) bool
}

// DumpStats says what HeapDump wrote.
type DumpStats struct {
	Objects uint64 // object lines
	Shapes  uint64 // SHAPE lines (3.3+)
	Roots   int    // ROOT lines
	// Skipped are objects left out because their memory did not hold
	// together (only expected when the process runs during the walk).
	Skipped uint64
	// SkippedPages are heap pages that could not be read.
	SkippedPages int
	// BudgetSpent says the dump's read budget ran out: what the process's
	// memory claimed was far more than it holds (a hostile or corrupt
	// process), and the objects read after were cut short.
	BudgetSpent bool
	Bytes       int64 // bytes written
	// Partial counts the objects written with less than their decoder
	// would have read (their header and the references found before it
	// stopped, and "partial": the reason), by reason; PartialTotal is
	// their sum. One object that cannot be decoded costs that object
	// alone.
	Partial      map[string]uint64
	PartialTotal uint64
	// PartialTypes counts the partial objects by type; FirstPartial is
	// the address of the first one (each has "partial" in its line).
	PartialTypes map[string]uint64
	FirstPartial uint64
	// Panicked counts the partial objects whose decoder panicked (a bug
	// rbscope recovered from; the fuzzer wants none).
	Panicked uint64
	// Allocator names the allocator whose metadata sized the blocks that
	// no layout sizes (the data of typed data of unknown types); when it
	// is unknown or its metadata did not pass the checks, AllocatorWhy
	// says why, and those blocks were not scanned.
	Allocator    malloc.Kind
	AllocatorWhy string
}

// Caveats lists, in words, what the dump left out or wrote partially
// (nothing for a complete dump).
func (st *DumpStats) Caveats() []string {
	var out []string
	if st.PartialTotal > 0 {
		reasons := make([]string, 0, len(st.Partial))
		for r, n := range st.Partial {
			reasons = append(reasons, fmt.Sprintf("%d: %s", n, r))
		}
		sort.Strings(reasons)
		types := make([]string, 0, len(st.PartialTypes))
		for t := range st.PartialTypes {
			types = append(types, t)
		}
		sort.Slice(types, func(i, j int) bool {
			if a, b := st.PartialTypes[types[i]], st.PartialTypes[types[j]]; a != b {
				return a > b
			}
			return types[i] < types[j]
		})
		for i, t := range types {
			types[i] = fmt.Sprintf("%d %s", st.PartialTypes[t], t)
		}
		out = append(out, fmt.Sprintf("%d objects written partially, each marked \"partial\" in its line (%s; the first at %#x) because of: %s",
			st.PartialTotal, strings.Join(types, ", "), st.FirstPartial, strings.Join(reasons, "; ")))
	}
	if st.AllocatorWhy != "" {
		out = append(out, fmt.Sprintf("the data of typed data of unknown types was not scanned (allocator %s: %s)", st.Allocator, st.AllocatorWhy))
	}
	return out
}

// maxPartialReasons bounds the reasons DumpStats.Partial keeps apart.
const maxPartialReasons = 8

// HeapDump writes every live object of the GC heap to w as one JSON object
// per line in the format of ObjectSpace.dump_all, ROOT lines first. The
// process should be paused (see HeapCensus).
//
// References are what Ruby's GC marks from each object (its class left
// out, as dump_all does): for OBJECT, ARRAY, HASH, STRUCT, STRING,
// REGEXP, MATCH, RATIONAL and COMPLEX exactly as dump_all writes them; for
// CLASS and MODULE the superclass, the attached object of a singleton
// class, instance variables (and class variables), constants, the class
// path, the method table and the call caches; for ICLASS the superclass,
// includer and method table; the generic instance variables of any object;
// DATA, IMEMO and FILE as dump_graph.go decodes them. References found by
// a conservative scan are listed again in "conservative_references"; a
// WeakMap's entries and a class's subclasses are "weak_references". On 3.3+ SHAPE lines follow the
// ROOT lines, as dump_all writes them.
//
// Roots: "vm" holds the Thread objects, Object, BasicObject and Kernel
// (through which every named class and constant is reached) and what the
// rb_vm_t and main ractor hold; "global_tbl" the values of global
// variables; "global_symbols" the symbol table; "finalizers" the
// finalizer table's values; "machine_context" what the threads' machine
// stacks and registers point at (with opt.MachineContext). Each Thread
// references the values on its VM stack.
//
// The dump's reads are bounded by a budget (see readBudget); a dump that
// spends it says so in DumpStats.BudgetSpent and leaves out what it could
// not read.
func (v *VM) HeapDump(w io.Writer, opt DumpOptions) (*DumpStats, error) {
	if err := v.Supports(layout.FeatureDump); err != nil {
		return nil, err
	}
	maps, err := v.T.Mappings()
	if err != nil {
		return nil, err
	}
	bt := &budgeted{Target: v.T, left: readBudget(maps)}
	v = v.withTarget(bt)
	st, err := v.heapDump(w, opt)
	if st != nil {
		st.BudgetSpent = bt.spent
	}
	return st, err
}

func (v *VM) heapDump(w io.Writer, opt DumpOptions) (*DumpStats, error) {
	pages, badHeaders, err := v.pageHeaders()
	if err != nil {
		return nil, err
	}
	d := v.newDumper(w, pages, opt)
	d.stats.SkippedPages = badHeaders
	if d.maps, err = v.T.Mappings(); err != nil {
		return nil, err
	}
	if d.L.ShapeSize > 0 && d.L.ShapeTreeList >= 0 {
		d.shapeList = v.findShapeList()
	}
	d.stats.SkippedPages += d.copyPages()
	d.alloc = malloc.Identify(chunkReader{&d.chunks}, d.maps, d.allocProbes())
	d.stats.Allocator, d.stats.AllocatorWhy = d.alloc.Named, d.alloc.Why
	d.genIVRaw = map[uint64][]uint64{}
	d.genIV = d.genericIvars()
	for _, r := range d.roots() {
		d.rootLine(r.name, r.refs)
		if err := d.flush(false); err != nil {
			return &d.stats, err
		}
	}
	if d.L.DumpShapes == 1 && d.shapeList != 0 {
		if err := d.shapeLines(); err != nil {
			return &d.stats, err
		}
	}
	for i, p := range pages {
		body := d.bodies[i]
		for off := int64(0); off+p.slotSize <= int64(len(body)); off += p.slotSize {
			d.object(p.start+uint64(off), body[off:off+p.slotSize])
		}
		if opt.Progress != nil {
			opt.Progress(i+1, len(pages))
		}
		if err := d.flush(false); err != nil {
			return &d.stats, err
		}
	}
	d.buf = heap.AppendEndLine(d.buf, uint64(d.stats.Roots)+d.stats.Shapes+d.stats.Objects)
	return &d.stats, d.flush(true)
}

// allocProbes returns blocks of known size the allocator returned, to
// check its metadata against: the rb_vm_t and the bodies of the first
// instruction sequences in the heap.
func (d *dumper) allocProbes() []malloc.Probe {
	L := d.L
	var out []malloc.Probe
	if vm, err := d.v.vmPtr(); err == nil && vm != 0 {
		out = append(out, malloc.Probe{Addr: vm, Size: uint64(L.VMSize)})
	}
	for i, p := range d.pages {
		body := d.bodies[i]
		for off := int64(0); off+p.slotSize <= int64(len(body)) && len(out) < 3; off += p.slotSize {
			slot := body[off : off+p.slotSize]
			flags := le64(slot, L.RBasicFlags)
			if flags&d.tmask == d.tImemo && d.imemoKind(flags) == L.ImemoIseq {
				if b := le64(slot, L.IseqBody); b != 0 {
					out = append(out, malloc.Probe{Addr: b, Size: uint64(iseqBodyValues(L))})
				}
			}
		}
	}
	return out
}

// chunkReader reads through the dumper's chunk cache.
type chunkReader struct{ c *chunkCache }

func (r chunkReader) ReadAt(p []byte, addr uint64) (int, error) {
	if err := r.c.read(p, addr); err != nil {
		return 0, err
	}
	return len(p), nil
}

// copyPages copies every heap page into memory before anything is
// decoded, so that whether a word points at a live object is answered
// from the copy (the conservative scans ask it of every word), and
// returns how many pages could not be read (their bodies stay nil).
func (d *dumper) copyPages() (skipped int) {
	d.bodies = make([][]byte, len(d.pages))
	sl, isSnap := d.v.m.t.(slicer)
	for i, p := range d.pages {
		if isSnap { // already a copy: use it in place
			if b, ok := sl.Slice(p.start, int(p.slotSize*p.total)); ok {
				d.bodies[i] = b
				continue
			}
		}
		body := make([]byte, int(p.slotSize*p.total))
		if target.ReadFull(d.v.m.t, body, p.start) != nil {
			skipped++
			continue
		}
		d.bodies[i] = body
	}
	return skipped
}

// slotAt returns the copy of the slot that starts at addr, or nil when
// addr is not the start of a slot of a page that was read.
func (d *dumper) slotAt(addr uint64) []byte {
	i := d.lastPage // references often point into the page of the last one
	if i >= len(d.pages) || addr < d.pages[i].start || addr >= d.pages[i].end() {
		i = sort.Search(len(d.pages), func(i int) bool { return d.pages[i].end() > addr })
	}
	if i == len(d.pages) || addr < d.pages[i].start || i >= len(d.bodies) || d.bodies[i] == nil {
		return nil
	}
	d.lastPage = i
	p := d.pages[i]
	off := addr - p.start
	if off%uint64(p.slotSize) != 0 {
		return nil
	}
	return d.bodies[i][off : off+uint64(p.slotSize)]
}

// dumper holds the state of one HeapDump.
type dumper struct {
	v     *VM
	L     *layout.Layout
	w     io.Writer
	pages []heapPage
	// bodies are the copies of the pages' slots (nil: not readable)
	bodies   [][]byte
	lastPage int // the page slotAt found last
	opt      DumpOptions
	stats    DumpStats
	// subclassSteps is what the dump's walks of subclass lists may still
	// take together (subclasses).
	subclassSteps int64

	buf       []byte              // JSON not yet written
	refs      []uint64            // references of the current object
	cons      []uint64            // its conservative references (see dump_graph.go)
	weak      []uint64            // its weak references (a WeakMap's keys and values)
	body      []byte              // the iseq body being decoded
	genIV     map[uint64][]uint64 // generic instance variables by object
	genIVRaw  map[uint64][]uint64 // their slots as they are (set or not, immediates)
	dataTypes map[uint64]string   // rb_data_type_t -> wrap_struct_name
	scratch   []byte              // out-of-slot reads
	chunks    chunkCache          // serves them
	maps      []target.Mapping    // the process's mappings
	alloc     malloc.Identified   // sizes the blocks no layout sizes
	klass     uint64              // the current object's class (left out of references)

	shapeList uint64 // rb_shape_tree_ptr->shape_list (0: no shapes)
	shapes    map[uint64]shapeInfo
	// the names of instance variables by shape ID (3.2+) and by class
	// (2.7, 3.1; see dump_ivars.go), nil when unreadable
	shapeNames map[uint64][]ivarSlot
	classNames map[uint64][]ivarSlot
	ivals      []uint64        // the ivar values of the current object
	noName     map[uint64]bool // IDs whose name could not be read
	names      map[uint64]dumpClassName
	newValue   bool // Ruby 3.2+: no value for empty strings

	// type codes and flags, as uint64 for the hot loop
	tmask, tNone, tZombie, tMoved, tImemo, tNode uint64
}

// dumpClassName is what a CLASS or MODULE line says about its name.
type dumpClassName struct{ name, real string }

// shapeInfo is what the dump needs of an object shape.
type shapeInfo struct {
	ivs, capa  uint64
	tooComplex bool
	ok         bool
}

// newDumper returns a dumper of the given pages; their copies (bodies)
// are for the caller to fill.
func (v *VM) newDumper(w io.Writer, pages []heapPage, opt DumpOptions) *dumper {
	d := &dumper{v: v, L: v.Layout, w: w, pages: pages, opt: opt,
		shapes: map[uint64]shapeInfo{}, shapeNames: map[uint64][]ivarSlot{}, classNames: map[uint64][]ivarSlot{}, noName: map[uint64]bool{}, names: map[uint64]dumpClassName{}, dataTypes: map[uint64]string{}}
	d.init()
	// Each class or iclass is on one list (its superclass's or its
	// module's): the walks together take at most one step an object.
	d.subclassSteps = 1 << 16
	for _, pg := range pages {
		d.subclassSteps += max(pg.total, 0)
	}
	return d
}

func (d *dumper) init() {
	L := d.L
	d.tmask, d.tNone, d.tZombie, d.tMoved = uint64(L.TMask), uint64(L.TNone), uint64(L.TZombie), uint64(L.TMoved)
	d.tImemo, d.tNode = uint64(L.TImemo), uint64(L.TNode)
	d.newValue = L.DumpOmitsEmptyValue == 1
	d.chunks.setTarget(d.v.m.t)
}

// shapeTree returns the address of the object shapes' tree (Ruby 3.2+),
// or 0: 4.0 keeps it in the global rb_shape_tree, earlier Rubies behind
// rb_shape_tree_ptr. A stripped libruby does not export
// rb_shape_tree_ptr; the exported rb_shape_get_shape_by_id loads it first
// thing.
func (v *VM) shapeTree() uint64 {
	if tree := v.locate("rb_shape_tree"); tree != 0 {
		return tree
	}
	c := v.locate("rb_shape_tree_ptr")
	if c == 0 {
		return 0
	}
	tree, err := v.m.u64(c)
	if err != nil {
		return 0
	}
	return tree
}

// findShapeList returns the shape tree's shape_list, or 0.
func (v *VM) findShapeList() uint64 {
	l, _ := v.shapeListIn(v.shapeTree())
	return l
}

// shapeListIn reads the shape list of the shape tree at tree, checking
// that its root shape has no instance variables.
func (v *VM) shapeListIn(tree uint64) (uint64, bool) {
	L := v.Layout
	if tree == 0 || tree&7 != 0 {
		return 0, false
	}
	l, err := v.m.u64(at(tree, L.ShapeTreeList))
	if err != nil || l == 0 || l&7 != 0 {
		return 0, false
	}
	root, err := v.m.read(l, int(L.ShapeSize))
	if err != nil || attrIndex(L, root, L.ShapeNextIVIndex) != 0 {
		return 0, false // the root shape has no instance variables
	}
	return l, true
}

// flush writes the collected JSON once there is enough of it (or all of
// it when final).
func (d *dumper) flush(final bool) error {
	if len(d.buf) == 0 || (!final && len(d.buf) < dumpFlush) {
		return nil
	}
	n, err := d.w.Write(d.buf)
	d.stats.Bytes += int64(n)
	d.buf = d.buf[:0]
	if err != nil {
		return fmt.Errorf("writing the dump: %w", err)
	}
	return nil
}

// read reads n bytes at addr into the scratch buffer.
func (d *dumper) read(addr uint64, n int) ([]byte, error) {
	if addr == 0 || n < 0 {
		return nil, errTorn
	}
	if cap(d.scratch) < n {
		d.scratch = make([]byte, n)
	}
	b := d.scratch[:n]
	if err := d.chunks.read(b, addr); err != nil {
		if errors.Is(err, errReadBudget) {
			return nil, err
		}
		return nil, errTorn
	}
	return b, nil
}

// ref adds a reference if val is a heap object other than the class.
//
// In a heap that holds together every VALUE an object holds is a live
// object; a word that is not (memory torn by a running process, or a
// corrupt or hostile one) is left out, so that garbage costs no output.
func (d *dumper) ref(val uint64) {
	if val != d.klass && d.live(val) {
		d.refs = append(d.refs, val)
	}
}

// refWords adds the references among n VALUEs at addr, read in chunks.
func (d *dumper) refWords(addr uint64, n uint64) error {
	if n > maxDumpElems {
		return errTorn
	}
	for n > 0 {
		k := min(n, dumpChunk)
		b, err := d.read(addr, int(k*8))
		if err != nil {
			return err
		}
		for i := 0; i < len(b); i += 8 {
			d.ref(binary.LittleEndian.Uint64(b[i:]))
		}
		addr += k * 8
		n -= k
	}
	return nil
}

// refSlotWords adds the references among n VALUEs at off in the slot.
func (d *dumper) refSlotWords(slot []byte, off int64, n uint64) error {
	if off < 0 || n > uint64(len(slot)) || off+int64(n)*8 > int64(len(slot)) {
		return errTorn
	}
	for i := uint64(0); i < n; i++ {
		d.ref(le64(slot, off+int64(i)*8))
	}
	return nil
}

// appendAddr appends "0x..." (with the quotes).
func appendAddr(b []byte, a uint64) []byte {
	b = append(b, '"', '0', 'x')
	b = strconv.AppendUint(b, a, 16)
	return append(b, '"')
}

// appendAddrs appends addresses separated by ", ".
func appendAddrs(b []byte, addrs []uint64) []byte {
	for i, a := range addrs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendAddr(b, a)
	}
	return b
}

// key appends `, "name":`, the start of a field.
func (d *dumper) key(name string) {
	d.buf = append(d.buf, ", \""...)
	d.buf = append(d.buf, name...)
	d.buf = append(d.buf, "\":"...)
}

func (d *dumper) field(name string, n uint64) {
	d.key(name)
	d.buf = strconv.AppendUint(d.buf, n, 10)
}

func (d *dumper) flag(name string) {
	d.key(name)
	d.buf = append(d.buf, "true"...)
}

func (d *dumper) strField(name, val string) {
	d.key(name)
	d.buf = appendJSONString(d.buf, []byte(val))
}

func (d *dumper) addrField(name string, a uint64) {
	d.key(name)
	d.buf = appendAddr(d.buf, a)
}

// appendJSONString appends s as a JSON string: the escapes dump_all uses,
// \u00XX for the other control characters, and invalid UTF-8 bytes as
// \u00XX of their value (so that the line stays valid JSON).
func appendJSONString(b []byte, s []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '\\':
				b = append(b, '\\', '\\')
			case c == '"':
				b = append(b, '\\', '"')
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

// dumpRoot is one ROOT line.
type dumpRoot struct {
	name string
	refs []uint64
}

func (d *dumper) rootLine(name string, refs []uint64) {
	d.buf = append(d.buf, `{"type":"ROOT", "root":"`...)
	d.buf = append(d.buf, name...)
	d.buf = append(d.buf, `", "references":[`...)
	d.buf = appendAddrs(d.buf, refs)
	d.buf = append(d.buf, ']')
	if d.stats.Roots == 0 {
		d.buf = append(d.buf, heap.DumpedByField...)
	}
	d.buf = append(d.buf, "}\n"...)
	d.stats.Roots++
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

// object appends the line of the object in slot at addr, if it is live.
func (d *dumper) object(addr uint64, slot []byte) {
	L := d.L
	flags := le64(slot, L.RBasicFlags)
	typ := flags & d.tmask
	if typ == d.tNone || typ == d.tZombie || typ == d.tMoved {
		return
	}
	mark := len(d.buf)
	if err := d.encode(addr, slot, flags, typ); err != nil {
		d.buf = d.buf[:mark]
		d.stats.Skipped++
		return
	}
	d.stats.Objects++
}

// partial counts an object of type typeName at addr written partially
// for reason.
func (d *dumper) partial(addr uint64, typeName, reason string) {
	if d.stats.Partial == nil {
		d.stats.Partial = map[string]uint64{}
		d.stats.PartialTypes = map[string]uint64{}
		d.stats.FirstPartial = addr
	}
	d.stats.PartialTypes[typeName]++
	if _, ok := d.stats.Partial[reason]; !ok && len(d.stats.Partial) >= maxPartialReasons {
		reason = "other reasons"
	}
	d.stats.Partial[reason]++
	d.stats.PartialTotal++
}

// decodeSafely runs decodeBody, turning a panic into an error: a decoder
// that meets memory it did not expect costs its object, not the dump.
func (d *dumper) decodeSafely(addr uint64, slot []byte, flags, typ uint64) (memsize uint64, err error) {
	defer func() {
		if r := recover(); r != nil {
			d.stats.Panicked++
			err = fmt.Errorf("decoder failed: %v", r)
		}
	}()
	if d.opt.failDecode != nil && d.opt.failDecode(addr) {
		panic(fmt.Sprintf("injected failure at %#x", addr))
	}
	memsize, err = d.decodeBody(addr, slot, flags, typ)
	if raw, ok := d.genIVRaw[addr]; ok && err == nil {
		d.genericIvarNames(flags, raw)
	}
	return memsize, err
}

// encode appends one object line.
func (d *dumper) encode(addr uint64, slot []byte, flags, typ uint64) error {
	L := d.L
	v := d.v
	d.refs = d.refs[:0]
	d.cons = d.cons[:0]
	d.weak = d.weak[:0]
	d.klass = le64(slot, L.RBasicKlass)
	if typ == d.tImemo || typ == d.tNode {
		d.klass = 0
	}
	tn := v.TypeName(int64(typ))
	if len(tn) > 8 && tn[:8] == "UNKNOWN_" {
		return errTorn
	}
	d.buf = append(d.buf, `{"address":`...)
	d.buf = appendAddr(d.buf, addr)
	d.buf = append(d.buf, `, "type":"`...)
	d.buf = append(d.buf, tn...)
	d.buf = append(d.buf, '"')
	if d.shapeList != 0 {
		d.field("shape_id", flags>>uint64(L.ShapeFlagShift))
		d.field("slot_size", uint64(len(slot)))
	}
	if d.klass != 0 {
		d.addrField("class", d.klass)
	}
	if flags&uint64(L.FlFreeze) != 0 {
		d.flag("frozen")
	}
	body := len(d.buf)
	memsize, err := d.decodeSafely(addr, slot, flags, typ)
	if err != nil {
		// What the decoder appended may stop mid-field: keep the header
		// and the references found so far, and say why.
		d.buf = d.buf[:body]
		reason := err.Error()
		if errors.Is(err, errTorn) {
			reason = "its memory could not be read or did not hold together"
		}
		d.partial(addr, tn, reason)
		d.strField("partial", reason)
		memsize = uint64(len(slot))
	}
	d.refs = append(d.refs, d.genIV[addr]...)
	cons := consOnly(d.refs, d.cons)
	if len(d.refs)+len(cons) > 0 {
		d.buf = append(d.buf, `, "references":[`...)
		d.buf = appendAddrs(d.buf, d.refs)
		if len(d.refs) > 0 && len(cons) > 0 {
			d.buf = append(d.buf, ", "...)
		}
		d.buf = appendAddrs(d.buf, cons)
		d.buf = append(d.buf, ']')
	}
	if len(cons) > 0 {
		d.buf = append(d.buf, `, "conservative_references":[`...)
		d.buf = appendAddrs(d.buf, cons)
		d.buf = append(d.buf, ']')
	}
	if len(d.weak) > 0 {
		d.buf = append(d.buf, `, "weak_references":[`...)
		d.buf = appendAddrs(d.buf, d.weak)
		d.buf = append(d.buf, ']')
	}
	d.field("memsize", memsize)
	d.buf = append(d.buf, "}\n"...)
	return nil
}

// decodeBody appends what an object's type holds beyond the header, and
// returns its memsize.
func (d *dumper) decodeBody(addr uint64, slot []byte, flags, typ uint64) (uint64, error) {
	L := d.L
	memsize := uint64(len(slot))
	var err error
	switch int64(typ) {
	case L.TString:
		memsize, err = d.str(slot, flags, memsize)
	case L.TSymbol:
		err = d.symbol(slot)
	case L.TArray:
		memsize, err = d.array(slot, flags, memsize)
	case L.THash:
		memsize, err = d.hash(slot, flags, memsize)
	case L.TObject:
		memsize, err = d.robject(slot, flags, memsize)
	case L.TStruct:
		memsize, err = d.rstruct(slot, flags, memsize)
	case L.TClass, L.TModule, L.TIClass:
		err = d.class(addr, slot, flags, int64(typ))
	case L.TFloat:
		d.key("value")
		d.buf = append(d.buf, '"')
		d.buf = appendCG(d.buf, math.Float64frombits(le64(slot, L.RFloatValue)), L.DumpFloatAltForm == 1)
		d.buf = append(d.buf, '"')
	case L.TRational:
		d.ref(le64(slot, L.RRationalNum))
		d.ref(le64(slot, L.RRationalDen))
	case L.TComplex:
		d.ref(le64(slot, L.RComplexReal))
		d.ref(le64(slot, L.RComplexImag))
	case L.TRegexp:
		d.ref(le64(slot, L.RRegexpSrc))
	case L.TMatch:
		d.ref(le64(slot, L.RMatchRegexp))
		d.ref(le64(slot, L.RMatchStr))
	case L.TData:
		d.data(slot)
	case L.TFile:
		if fptr := le64(slot, L.RFileFptr); L.RFileFptr >= 0 && fptr != 0 {
			// rb_io_t: its path, encodings' converters, ...
			d.scanMem(fptr, uint64(L.IOSize), d.refCons) //nolint:errcheck // an unreadable rb_io_t adds nothing
		}
	case L.TImemo:
		d.imemo(slot, flags)
	}
	return memsize, err
}

// Encoding indexes fixed in every Ruby (encindex.h).
var builtinEncodings = [...]struct {
	name    string
	compat  bool // ASCII-compatible
	termlen uint64
}{
	{"ASCII-8BIT", true, 1}, {"UTF-8", true, 1}, {"US-ASCII", true, 1},
	{"UTF-16BE", false, 2}, {"UTF-16LE", false, 2}, {"UTF-32BE", false, 4}, {"UTF-32LE", false, 4},
	{"UTF-16", false, 2}, {"UTF-32", false, 4}, {"UTF8-MAC", true, 1}, {"EUC-JP", true, 1}, {"Windows-31J", true, 1},
}

// strContent reads a String's length and bytes (nil when longer than the
// dump prints).
func (d *dumper) strContent(slot []byte, flags uint64) (length uint64, ptr uint64, err error) {
	L := d.L
	h := strHeader(L, slot, flags)
	if !h.embedded {
		return h.length, h.ptr, nil
	}
	length = h.length
	if L.RStringEmbedAry+int64(length) > int64(len(slot)) {
		return 0, 0, errTorn
	}
	return length, 0, nil
}

// str appends a STRING's fields: embedded, fstring, shared, bytesize,
// value (for 7-bit contents in an ASCII-compatible encoding, as dump_all
// prints it), encoding; memsize adds a malloc'd buffer's capacity.
func (d *dumper) str(slot []byte, flags, memsize uint64) (uint64, error) {
	L := d.L
	noEmbed := flags&uint64(L.RStringNoEmbed) != 0
	shared := noEmbed && flags&uint64(L.FlEltsShared) != 0
	if !noEmbed {
		d.flag("embedded")
	}
	if flags&uint64(L.RStringFstr) != 0 {
		d.flag("fstring")
	}
	enc := (flags & uint64(L.EncodingMask)) >> uint64(L.EncodingShift)
	if shared {
		d.flag("shared")
		d.ref(le64(slot, L.RStringShared))
	} else {
		if err := d.strValue(slot, flags, enc, !d.opt.RedactStrings); err != nil {
			return 0, err
		}
		if noEmbed {
			termlen := uint64(1)
			if enc < uint64(len(builtinEncodings)) {
				termlen = builtinEncodings[enc].termlen
			}
			if capa := le64(slot, L.RStringHeapCapa); capa < maxOutOfSlot {
				memsize += capa + termlen
			}
		}
	}
	if enc != 0 && enc < uint64(len(builtinEncodings)) {
		d.strField("encoding", builtinEncodings[enc].name)
	}
	return memsize, nil
}

// strValue appends bytesize and, when dump_all would print it and withValue
// is set, value.
func (d *dumper) strValue(slot []byte, flags, enc uint64, withValue bool) error {
	L := d.L
	length, ptr, err := d.strContent(slot, flags)
	if err != nil {
		return err
	}
	if length > maxDumpString {
		return errTorn
	}
	d.field("bytesize", length)
	compat := enc >= uint64(len(builtinEncodings)) || builtinEncodings[enc].compat
	if !withValue || !compat || (length == 0 && d.newValue) {
		return nil
	}
	if length > 0 && flags&uint64(L.CoderangeMask) != 0 && flags&uint64(L.CoderangeMask) != uint64(L.Coderange7Bit) {
		return nil // known not to be 7-bit
	}
	var b []byte
	if flags&uint64(L.RStringNoEmbed) == 0 {
		b = slot[L.RStringEmbedAry : L.RStringEmbedAry+int64(length)]
	} else if length > 0 {
		if length > dumpChunk {
			// Probe the last byte before allocating for a long string: a
			// torn length must not cost gigabytes.
			if _, err := d.read(ptr+length-1, 1); err != nil {
				return err
			}
		}
		if b, err = d.read(ptr, int(length)); err != nil {
			return err
		}
	}
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return nil
		}
	}
	d.key("value")
	d.buf = appendJSONString(d.buf, b)
	return nil
}

// symbol appends a dynamic SYMBOL's name as dump_all does (its fstr's
// bytesize and value); a Symbol marks nothing.
func (d *dumper) symbol(slot []byte) error {
	fstr := le64(slot, d.L.RSymbolFstr)
	if !d.v.isHeapObject(fstr) {
		return nil
	}
	b := d.slotAt(fstr)
	if b == nil {
		return nil
	}
	s := append([]byte(nil), b...)
	flags := le64(s, d.L.RBasicFlags)
	if int64(flags&d.tmask) != d.L.TString {
		return nil
	}
	return d.strValue(s, flags, (flags&uint64(d.L.EncodingMask))>>uint64(d.L.EncodingShift), true)
}

// array appends length, shared, embedded and the elements (or the shared
// root) as references.
func (d *dumper) array(slot []byte, flags, memsize uint64) (uint64, error) {
	L := d.L
	h := aryHeader(L, slot, flags)
	n := h.length
	if h.embedded {
		d.field("length", n)
		d.flag("embedded")
		return memsize, d.refSlotWords(slot, h.off, n)
	}
	if n > maxDumpElems {
		return 0, errTorn
	}
	d.field("length", n)
	if flags&uint64(L.FlEltsShared) != 0 {
		if n > 0 {
			d.flag("shared")
		}
		d.ref(le64(slot, L.RArraySharedRoot))
		return memsize, nil
	}
	memsize += d.v.outOfSlot(uint64(L.TArray), flags, slot)
	if n == 0 {
		return memsize, nil
	}
	return memsize, d.refWords(h.ptr, n)
}

// hash appends size, default (a default proc) and the keys and values,
// then ifnone, as references.
func (d *dumper) hash(slot []byte, flags, memsize uint64) (uint64, error) {
	L := d.L
	ifnone := le64(slot, L.RHashIfnone)
	if flags&uint64(L.RHashSTFlag) != 0 {
		var head []byte
		if L.RHashST < 0 { // 3.3: the st_table is in the slot after struct RHash
			if L.RHashSize+L.StEntries+8 > int64(len(slot)) {
				return 0, errTorn
			}
			head = slot[L.RHashSize:]
		} else {
			b, err := d.read(le64(slot, L.RHashST), int(L.StEntries)+8)
			if err != nil {
				return 0, err
			}
			head = append([]byte(nil), b...)
		}
		d.field("size", le64(head, L.StNumEntries))
		if flags&uint64(L.RHashProcDefault) != 0 {
			d.addrField("default", ifnone)
		}
		if err := d.stEntries(head, true); err != nil {
			return 0, err
		}
	} else {
		size := (flags & uint64(L.RHashARSizeMask)) >> uint64(L.RHashARSizeShift)
		bound := (flags & uint64(L.RHashARBoundMask)) >> uint64(L.RHashARBoundShift)
		d.field("size", size)
		if flags&uint64(L.RHashProcDefault) != 0 {
			d.addrField("default", ifnone)
		}
		if bound > uint64(L.ARTableMax) || size > bound {
			return 0, errTorn
		}
		var pairs []byte
		if L.RHashAR >= 0 {
			ar := le64(slot, L.RHashAR)
			if ar != 0 {
				b, err := d.read(ar+uint64(L.ARTablePairs), int(L.ARTableMax)*16)
				if err != nil {
					return 0, err
				}
				pairs = b
				memsize += uint64(L.ARTablePairs + L.ARTableMax*16)
			}
		} else {
			off := L.RHashSize + L.ARTablePairs
			if off+int64(bound)*16 > int64(len(slot)) {
				return 0, errTorn
			}
			pairs = slot[off:]
		}
		if pairs != nil {
			undef := uint64(L.Qundef)
			for i := uint64(0); i < bound; i++ {
				k := le64(pairs, int64(i*16))
				if k == undef {
					continue
				}
				d.ref(k)
				d.ref(le64(pairs, int64(i*16+8)))
			}
		}
	}
	d.ref(ifnone)
	return memsize, nil
}

// stEntries adds the live entries of the st_table whose head is given:
// keys and values (or only values).
func (d *dumper) stEntries(head []byte, keys bool) error {
	return d.stEach(head, func(key, rec uint64) {
		if keys {
			d.ref(key)
		}
		d.ref(rec)
	})
}

// stEach calls fn with the key and record of each live entry of the
// st_table whose head is given, reading the entries in chunks; fn must not
// read memory (the chunk is the dumper's scratch buffer).
func (d *dumper) stEach(head []byte, fn func(key, rec uint64)) error {
	L := d.L
	start, bound := le64(head, L.StEntriesStart), le64(head, L.StEntriesBound)
	entries := le64(head, L.StEntries)
	if bound < start || bound-start > maxDumpElems/3 {
		return errTorn
	}
	esz := uint64(L.StEntrySize)
	for i := start; i < bound; {
		k := min(bound-i, dumpChunk/3)
		b, err := d.read(entries+i*esz, int(k*esz))
		if err != nil {
			return err
		}
		for j := uint64(0); j < k; j++ {
			e := b[j*esz:]
			if le64(e, L.StEntryHash) == ^uint64(0) { // deleted
				continue
			}
			fn(le64(e, L.StEntryKey), le64(e, L.StEntryRecord))
		}
		i += k
	}
	return nil
}

// stPairs returns the live entries of the st_table whose address is held
// at ptr (key, record pairs), for tables whose entries lead to more reads.
func (d *dumper) stPairs(ptr uint64) [][2]uint64 {
	b, err := d.read(ptr, 8)
	if err != nil {
		return nil
	}
	return d.stPairsAt(binary.LittleEndian.Uint64(b))
}

// stPairsAt returns the live entries of the st_table at tbl.
func (d *dumper) stPairsAt(tbl uint64) [][2]uint64 {
	if tbl == 0 {
		return nil
	}
	h, err := d.read(tbl, int(d.L.StEntries)+8)
	if err != nil {
		return nil
	}
	var pairs [][2]uint64
	d.stEach(append([]byte(nil), h...), func(key, rec uint64) { pairs = append(pairs, [2]uint64{key, rec}) }) //nolint:errcheck // a torn table gives what was read
	return pairs
}

// maxShapeID bounds the shape ids read from objects, which may be torn:
// Ruby 3.3 has room for 2^19 shapes (SHAPE_BUFFER_SIZE); the bound leaves
// headroom for later versions.
const maxShapeID = 1 << 24

// shape returns what the dump needs of shape id.
func (d *dumper) shape(id uint64) shapeInfo {
	if s, ok := d.shapes[id]; ok {
		return s
	}
	L := d.L
	var s shapeInfo
	index := shapeIndex(L, id)
	if d.shapeList != 0 && index < maxShapeID {
		if b, err := d.read(d.shapeList+index*uint64(L.ShapeSize), int(L.ShapeSize)); err == nil {
			s = shapeInfo{
				ivs:  attrIndex(L, b, L.ShapeNextIVIndex),
				capa: attrIndex(L, b, L.ShapeCapacity),
				tooComplex: int64(b[L.ShapeType]) == L.ShapeTooComplex ||
					(L.ShapeIDFlTooComplex > 0 && id&uint64(L.ShapeIDFlTooComplex) != 0),
				ok: true,
			}
		}
	}
	if len(d.shapes) < 1<<20 {
		d.shapes[id] = s
	}
	return s
}

// shapeIndex returns the index in the shape list of a shape ID (4.0 keeps
// flags and a heap index in its high bits).
func shapeIndex(L *layout.Layout, id uint64) uint64 {
	var high uint64
	if L.ShapeIDFlagsMask > 0 {
		high |= uint64(L.ShapeIDFlagsMask)
	}
	if L.ShapeIDHeapIndexMask > 0 {
		high |= uint64(L.ShapeIDHeapIndexMask)
	}
	return id &^ high
}

// attrIndex reads an attr_index_t of a shape at off.
func attrIndex(L *layout.Layout, b []byte, off int64) uint64 {
	if off < 0 {
		return 0
	}
	switch L.AttrIndexSize {
	case 1:
		return uint64(b[off])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[off:]))
	}
	return uint64(le32(b, off))
}

// objectEmbedded reports whether an object's ivars are in its slot.
func objectEmbedded(L *layout.Layout, flags uint64) (bool, error) {
	switch {
	case L.RObjectHeapFlag > 0:
		return flags&uint64(L.RObjectHeapFlag) == 0, nil
	case L.RObjectEmbedFlag > 0:
		return flags&uint64(L.RObjectEmbedFlag) != 0, nil
	}
	return false, errNoEmbedFlag
}

// errNoEmbedFlag: the layout says neither how an object's ivars are
// embedded nor how they are not.
var errNoEmbedFlag = errors.New("the layout has neither ROBJECT_EMBED nor ROBJECT_HEAP")

// robject appends embedded and ivars and the instance variables as
// references.
func (d *dumper) robject(slot []byte, flags, memsize uint64) (uint64, error) {
	L := d.L
	embedded, err := objectEmbedded(L, flags)
	if err != nil {
		return 0, err
	}
	var n uint64
	if d.shapeList != 0 {
		if embedded {
			d.flag("embedded")
		}
		s := d.shape(flags >> uint64(L.ShapeFlagShift))
		if !s.ok {
			return 0, errTorn
		}
		if s.tooComplex {
			tbl := le64(slot, L.RObjectHeapIVPtr)
			b, err := d.read(tbl, int(L.StEntries)+8)
			if err != nil {
				return 0, err
			}
			head := append([]byte(nil), b...)
			d.field("ivars", le64(head, L.StNumEntries))
			d.flag("too_complex_shape")
			if err := d.stEntries(head, false); err != nil {
				return 0, err
			}
			d.ivarTable(head)
			return memsize, nil
		}
		n = s.ivs
		if !embedded {
			memsize += s.capa * 8
		}
	} else if L.RObjectHeapNumIV < 0 {
		return 0, errTorn // a Ruby with shapes whose shape table was not found
	} else if embedded {
		n = uint64(L.RObjectEmbedLenMax)
	} else {
		n = uint64(le32(slot, L.RObjectHeapNumIV))
		memsize += n * 8
	}
	d.field("ivars", n)
	if embedded {
		err = d.refSlotWords(slot, L.RObjectEmbedAry, n)
	} else {
		err = d.refWords(le64(slot, L.RObjectHeapIVPtr), n)
	}
	if err != nil {
		return 0, err
	}
	d.objectIvars(slot, flags, n, embedded)
	return memsize, nil
}

// rstruct appends the members of a STRUCT as references.
func (d *dumper) rstruct(slot []byte, flags, memsize uint64) (uint64, error) {
	L := d.L
	if n := (flags & uint64(L.RStructEmbedLenMask)) >> uint64(L.RStructEmbedLenShift); n != 0 {
		return memsize, d.refSlotWords(slot, L.RStructEmbedAry, n)
	}
	n := le64(slot, L.RStructHeapLen)
	if n > maxDumpElems {
		return 0, errTorn
	}
	memsize += n * 8
	return memsize, d.refWords(le64(slot, L.RStructHeapPtr), n)
}

// class appends a CLASS, MODULE or ICLASS's superclass, name and the
// references decoded (see HeapDump).
func (d *dumper) class(addr uint64, slot []byte, flags uint64, typ int64) (err error) {
	L := d.L
	v := d.v
	var subErr error // the subclass walk's, which the rest does not wait for
	defer func() {
		if err == nil {
			err = subErr
		}
	}()
	super := le64(slot, L.RClassSuper)
	singleton := flags&uint64(L.FlSingleton) != 0
	ext, err := v.classExt(addr)
	if err != nil {
		ext = 0
	}
	if typ == L.TClass && singleton && L.ClassExtAttached >= 0 && ext != 0 {
		if a, err := v.m.u64(at(ext, L.ClassExtAttached)); err == nil {
			d.ref(a)
		}
	}
	if d.v.isHeapObject(super) {
		d.addrField("superclass", super)
		d.ref(super)
	}
	if typ != L.TIClass && d.klass != 0 {
		n, ok := d.names[addr]
		if !ok {
			if !singleton {
				n.name = v.className(addr)
			}
			if n.name == "" {
				if r := v.objClassName(addr); r != "" && r[0] != '#' {
					n.real = r
				}
			}
			d.names[addr] = n
		}
		if n.name != "" {
			d.strField("name", n.name)
		} else if n.real != "" {
			d.strField("real_class_name", n.real)
		}
		if singleton {
			d.flag("singleton")
		}
	}
	d.methodTable(slot, ext)
	d.classCaches(ext)
	subErr = d.subclasses(ext)
	if ext == 0 {
		return nil // 3.1: a class without extension marks only its superclass
	}
	if typ == L.TIClass {
		if L.ClassExtIncluder >= 0 && d.shapeList != 0 {
			if inc, err := v.m.u64(at(ext, L.ClassExtIncluder)); err == nil {
				d.ref(inc)
			}
		}
		return nil
	}
	// instance variables
	if L.ClassExtIVPtr >= 0 {
		if s := d.shape(flags >> uint64(L.ShapeFlagShift)); s.ok && !s.tooComplex && s.ivs > 0 {
			if ivptr, err := v.m.u64(at(ext, L.ClassExtIVPtr)); err == nil && ivptr != 0 {
				if err := d.refWords(ivptr, s.ivs); err != nil {
					return err
				}
				if names, ok := d.shapeIvars(flags >> uint64(L.ShapeFlagShift)); ok && s.ivs <= maxIvars && d.readIvals(ivptr, s.ivs) {
					d.ivarsByIndex(names, d.ivals)
				}
			}
		}
	} else if L.ClassExtIVTbl >= 0 {
		if tbl, err := v.m.u64(at(ext, L.ClassExtIVTbl)); err == nil && tbl != 0 {
			b, err := d.read(tbl, int(L.StEntries)+8)
			if err != nil {
				return err
			}
			head := append([]byte(nil), b...)
			if err := d.stEntries(head, false); err != nil {
				return err
			}
			d.ivarTable(head)
		}
	}
	// constants
	if tbl, err := v.m.u64(at(ext, L.ClassExtConstTbl)); err == nil && tbl != 0 {
		if err := d.constants(tbl); err != nil {
			return err
		}
	}
	if L.ClassExtClassPath >= 0 {
		if p, err := v.m.u64(at(ext, L.ClassExtClassPath)); err == nil {
			d.ref(p)
		}
	}
	return nil
}

// constants adds the value and file of every entry of a constant table
// (an rb_id_table of rb_const_entry_t pointers).
func (d *dumper) constants(tbl uint64) error {
	L := d.L
	raw, capa, ok := d.v.idTable(tbl)
	if !ok {
		return errTorn
	}
	for i := range capa {
		it := raw[i*int(L.IDItemSize):]
		if le32(it, L.IDItemKey) == 0 {
			continue
		}
		ce := le64(it, L.IDItemVal)
		b, err := d.read(ce, int(max(L.ConstEntryValue, L.ConstEntryFile))+8)
		if err != nil {
			continue
		}
		val, file := le64(b, L.ConstEntryValue), le64(b, L.ConstEntryFile)
		d.ref(val)
		d.ref(file)
	}
	return nil
}

// appendCG appends f as C's printf("%#g") does (dump_all prints Floats so
// since 3.0): six significant digits, trailing zeros and the decimal point
// kept; with alt false as "%g" does (2.7), without them.
func appendCG(b []byte, f float64, alt bool) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "nan"...)
	case math.IsInf(f, 1):
		return append(b, "inf"...)
	case math.IsInf(f, -1):
		return append(b, "-inf"...)
	}
	const prec = 6
	e := strconv.AppendFloat(nil, f, 'e', prec-1, 64)
	i := bytes.LastIndexByte(e, 'e')
	x, _ := strconv.Atoi(string(e[i+1:]))
	var out []byte
	if x < -4 || x >= prec {
		out = e
	} else {
		out = strconv.AppendFloat(nil, f, 'f', prec-1-x, 64)
	}
	if !alt {
		mant, exp := out, []byte(nil)
		if j := bytes.LastIndexByte(out, 'e'); j >= 0 {
			mant, exp = out[:j], out[j:]
		}
		if bytes.IndexByte(mant, '.') >= 0 {
			mant = bytes.TrimRight(mant, "0")
			mant = bytes.TrimSuffix(mant, []byte("."))
		}
		out = append(append([]byte(nil), mant...), exp...)
	}
	return append(b, out...)
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

// SnapshotStats says what HeapDumpSnapshot's copy cost the process.
type SnapshotStats struct {
	Paused time.Duration // how long its threads stood still
	Bytes  int64         // the memory copied meanwhile
	Held   int64         // what the copy takes (see target.Snapshot)
}

// HeapDumpSnapshot is HeapDump of a live process that stands still only
// while its memory is copied (target.Live.Snapshot): it runs again before
// anything is decoded, and the dump is decoded from the copy, with the
// machine_context root from the registers the copy kept. v must read l.
func (v *VM) HeapDumpSnapshot(l *target.Live, w io.Writer, opt DumpOptions) (*DumpStats, SnapshotStats, error) {
	if err := v.Supports(layout.FeatureDump); err != nil {
		return nil, SnapshotStats{}, err
	}
	v.PrepareHeapDump()
	snap, err := l.Snapshot()
	if err != nil {
		return nil, SnapshotStats{}, err
	}
	defer snap.Close()
	ss := SnapshotStats{Paused: snap.Paused, Bytes: snap.Bytes, Held: snap.Held}
	opt.MachineContext = true
	st, err := v.withTarget(snap).HeapDump(w, opt)
	return st, ss, err
}

// withTarget returns a VM that reads the same process through t (a
// snapshot of it, or a budgeted reader): it keeps what v found (the
// Build, the layout, the globals it located), not what it cached of
// memory. It is never closed: v owns the image and the Build.
func (v *VM) withTarget(t target.Target) *VM {
	w := *v
	w.T = t
	w.m = mem{t: t}
	w.tpTIDs = nil
	w.live = false
	w.ForgetCaches()
	return &w
}

// shapeLines writes a SHAPE line for every object shape, as dump_all does
// (3.3+): id, parent_id (not for a root), depth, shape_type, edge_name
// (an instance variable's), edges and memsize (the shape and its table of
// edges, unless it has a single child kept in place).
func (d *dumper) shapeLines() error {
	L := d.L
	if L.ShapeTreeNextID < 0 || L.ShapeParentID < 0 || L.ShapeEdges < 0 {
		return nil
	}
	tree := d.v.shapeTree()
	if tree == 0 {
		return nil
	}
	b, err := d.read(at(tree, L.ShapeTreeNextID), 4)
	if err != nil {
		return nil
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if n > maxShapeID {
		return nil
	}
	size := uint64(L.ShapeSize)
	all, err := d.read(d.shapeList, int(n*size))
	if err != nil {
		return nil
	}
	shapes := append([]byte(nil), all...)
	shape := func(id uint64) []byte { return shapes[id*size : (id+1)*size] }
	for id := uint64(0); id < n; id++ {
		s := shape(id)
		typ := int64(s[L.ShapeType])
		d.buf = append(d.buf, `{"address":`...)
		d.buf = appendAddr(d.buf, d.shapeList+id*size)
		d.buf = append(d.buf, `, "type":"SHAPE"`...)
		d.field("id", id)
		if typ != L.ShapeRoot {
			d.field("parent_id", uint64(le32(s, L.ShapeParentID)))
		}
		depth := uint64(1)
		for p := uint64(le32(s, L.ShapeParentID)); p < n && depth <= n; p = uint64(le32(shape(p), L.ShapeParentID)) {
			depth++
		}
		d.field("depth", depth)
		name := ""
		switch typ {
		case L.ShapeRoot:
			name = "ROOT"
		case L.ShapeIvar:
			name = "IVAR"
		case L.ShapeFrozen:
			name = "FROZEN"
		case L.ShapeTObject:
			name = "T_OBJECT"
		case L.ShapeTooComplex:
			name = "OBJ_TOO_COMPLEX"
		case L.ShapeObjID:
			name = "OBJ_ID"
		}
		d.strField("shape_type", name)
		if typ == L.ShapeIvar {
			id := le64(s, L.ShapeEdgeName)
			ivar, err := d.v.idName(id)
			if err != nil {
				ivar = "ID_INTERNAL(" + strconv.FormatUint(id>>uint64(L.IDScopeShift), 10) + ")"
			}
			d.buf = append(d.buf, `,"edge_name":`...) // sic: dump_all writes no space here
			d.buf = appendJSONString(d.buf, []byte(ivar))
		}
		edges, memsize := uint64(0), size
		switch e := le64(s, L.ShapeEdges); {
		case e == 0:
		case e&uint64(L.ShapeSingleChild) != 0: // a single child in place of a table
			edges = 1
		default:
			if h, err := d.read(e, int(max(L.IDTableNum, L.IDTableCapa)+4)); err == nil {
				edges = uint64(le32(h, L.IDTableNum))
				memsize += uint64(L.IDTableSize) + uint64(le32(h, L.IDTableCapa))*uint64(L.IDItemSize)
			}
		}
		d.field("edges", edges)
		d.field("memsize", memsize)
		d.buf = append(d.buf, "}\n"...)
		d.stats.Shapes++
		if err := d.flush(false); err != nil {
			return err
		}
	}
	return nil
}
