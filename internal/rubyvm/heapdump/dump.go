// Package heapdump writes a Ruby process's heap in the format of
// ObjectSpace.dump_all (internal/heap's writer), every live object with
// its references, from outside the process: it walks the heap pages
// rubyvm finds and decodes each object's slot, and what the slot points
// at, through rubyvm's object reader (the layout, the object headers,
// class names, IDs, id tables, shapes, roots). What it knows beyond that
// reader is the dump's own: which words of each kind of object Ruby's GC
// marks, the roots, the names of instance variables, the budget that
// bounds its reads, the copy of the pages it decodes from.
package heapdump

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/malloc"
	"github.com/rbscope/rbscope/internal/rubyvm"
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

// Options tune Write.
type Options struct {
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

// Stats says what Write wrote.
type Stats struct {
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
func (st *Stats) Caveats() []string {
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

// maxPartialReasons bounds the reasons Stats.Partial keeps apart.
const maxPartialReasons = 8

// Write writes every live object of v's GC heap to w as one JSON object
// per line in the format of ObjectSpace.dump_all, ROOT lines first. The
// process should be paused (see rubyvm.VM.HeapCensus).
//
// References are what Ruby's GC marks from each object (its class left
// out, as dump_all does): for OBJECT, ARRAY, HASH, STRUCT, STRING,
// REGEXP, MATCH, RATIONAL and COMPLEX exactly as dump_all writes them; for
// CLASS and MODULE the superclass, the attached object of a singleton
// class, instance variables (and class variables), constants, the class
// path, the method table and the call caches; for ICLASS the superclass,
// includer and method table; the generic instance variables of any object;
// DATA, IMEMO and FILE as graph.go decodes them. References found by
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
// spends it says so in Stats.BudgetSpent and leaves out what it could
// not read.
func Write(v *rubyvm.VM, w io.Writer, opt Options) (*Stats, error) {
	if err := v.Supports(layout.FeatureDump); err != nil {
		return nil, err
	}
	maps, err := v.T.Mappings()
	if err != nil {
		return nil, err
	}
	bt := &budgeted{Target: v.T, left: readBudget(maps)}
	v = v.WithTarget(bt)
	st, err := dump(v, w, opt)
	if st != nil {
		st.BudgetSpent = bt.spent
	}
	return st, err
}

func dump(v *rubyvm.VM, w io.Writer, opt Options) (*Stats, error) {
	pages, badHeaders, err := v.HeapPages()
	if err != nil {
		return nil, err
	}
	d := newDumper(v, w, pages, opt)
	d.stats.SkippedPages = badHeaders
	if d.maps, err = v.T.Mappings(); err != nil {
		return nil, err
	}
	if d.L.ShapeSize > 0 && d.L.ShapeTreeList >= 0 {
		d.shapeList = v.ShapeList()
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
		for off := int64(0); off+p.SlotSize <= int64(len(body)); off += p.SlotSize {
			d.object(p.Start+uint64(off), body[off:off+p.SlotSize])
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
	if vm, err := d.v.VMPtr(); err == nil && vm != 0 {
		out = append(out, malloc.Probe{Addr: vm, Size: uint64(L.VMSize)})
	}
	for i, p := range d.pages {
		body := d.bodies[i]
		for off := int64(0); off+p.SlotSize <= int64(len(body)) && len(out) < 3; off += p.SlotSize {
			slot := body[off : off+p.SlotSize]
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
	sl, isSnap := d.v.T.(slicer)
	for i, p := range d.pages {
		if isSnap { // already a copy: use it in place
			if b, ok := sl.Slice(p.Start, int(p.SlotSize*p.Total)); ok {
				d.bodies[i] = b
				continue
			}
		}
		body := make([]byte, int(p.SlotSize*p.Total))
		if target.ReadFull(d.v.T, body, p.Start) != nil {
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
	if i >= len(d.pages) || addr < d.pages[i].Start || addr >= d.pages[i].End() {
		i = sort.Search(len(d.pages), func(i int) bool { return d.pages[i].End() > addr })
	}
	if i == len(d.pages) || addr < d.pages[i].Start || i >= len(d.bodies) || d.bodies[i] == nil {
		return nil
	}
	d.lastPage = i
	p := d.pages[i]
	off := addr - p.Start
	if off%uint64(p.SlotSize) != 0 {
		return nil
	}
	return d.bodies[i][off : off+uint64(p.SlotSize)]
}

// dumper holds the state of one Write.
type dumper struct {
	v     *rubyvm.VM
	L     *layout.Layout
	w     io.Writer
	pages []rubyvm.HeapPage
	// bodies are the copies of the pages' slots (nil: not readable)
	bodies   [][]byte
	lastPage int // the page slotAt found last
	opt      Options
	stats    Stats
	// subclassSteps is what the dump's walks of subclass lists may still
	// take together (subclasses).
	subclassSteps int64

	buf       []byte              // JSON not yet written
	refs      []uint64            // references of the current object
	cons      []uint64            // its conservative references (see graph.go)
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
	// (2.7, 3.1; see ivars.go), nil when unreadable
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
func newDumper(v *rubyvm.VM, w io.Writer, pages []rubyvm.HeapPage, opt Options) *dumper {
	d := &dumper{v: v, L: v.Layout, w: w, pages: pages, opt: opt,
		shapes: map[uint64]shapeInfo{}, shapeNames: map[uint64][]ivarSlot{}, classNames: map[uint64][]ivarSlot{}, noName: map[uint64]bool{}, names: map[uint64]dumpClassName{}, dataTypes: map[uint64]string{}}
	d.init()
	// Each class or iclass is on one list (its superclass's or its
	// module's): the walks together take at most one step an object.
	d.subclassSteps = 1 << 16
	for _, pg := range pages {
		d.subclassSteps += max(pg.Total, 0)
	}
	return d
}

func (d *dumper) init() {
	L := d.L
	d.tmask, d.tNone, d.tZombie, d.tMoved = uint64(L.TMask), uint64(L.TNone), uint64(L.TZombie), uint64(L.TMoved)
	d.tImemo, d.tNode = uint64(L.TImemo), uint64(L.TNode)
	d.newValue = L.DumpOmitsEmptyValue == 1
	d.chunks.setTarget(d.v.T)
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
