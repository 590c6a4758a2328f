package rubyvm

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
	"github.com/rbscope/rbscope/internal/target"
)

// Limits that keep a heap walk of changing or corrupt memory finite.
const (
	// maxHeapPages bounds objspace->heap_pages.allocated_pages: 1<<24 pages
	// of 64 KiB are a terabyte of Ruby heap.
	maxHeapPages = 1 << 24
	// maxPageBytes bounds one page's slots (Ruby's pages are 16 KiB in 3.1
	// and 64 KiB in 3.3).
	maxPageBytes = 1 << 20
	// MaxOutOfSlot bounds a String's or Array's claimed capacity; a larger
	// one is a torn read and is not counted.
	MaxOutOfSlot = 1 << 40
)

// CensusRow is the number and size of live objects of one type and class.
type CensusRow struct {
	// Type is the ruby_value_type spelled as ObjectSpace.dump_all does:
	// "OBJECT", "STRING", "ARRAY", "IMEMO", ...
	Type string
	// Class is what obj.class names; "" for hidden objects (klass 0) and
	// for types whose klass word is not a class (IMEMO, NODE). Anonymous
	// classes are "#<Class:0x...>".
	Class string
	Count uint64
	// Bytes is the slot size, plus for non-embedded, non-shared Strings
	// and Arrays their malloc'd buffer's capacity.
	Bytes uint64
}

// Census is what a walk of every heap page found.
type Census struct {
	Pages   int    // heap pages walked
	Slots   uint64 // slots on them, free or not
	Free    uint64 // T_NONE slots
	Zombies uint64 // T_ZOMBIE: freed objects waiting for a finalizer
	Moved   uint64 // T_MOVED: forwarding addresses left by compaction
	Objects uint64 // live objects (all rows' counts)
	Bytes   uint64 // all rows' bytes
	// SkippedPages are pages that could not be read (only expected when
	// the process runs during the walk).
	SkippedPages int
	// ByType has one row per type (Class empty), ByClass one per type and
	// class; both largest (bytes, then count) first.
	ByType  []CensusRow
	ByClass []CensusRow
}

type censusKey struct {
	typ   int64
	klass uint64
}

type censusAgg struct{ count, bytes uint64 }

// TypeName spells a ruby_value_type as ObjectSpace.dump_all does.
func (v *VM) TypeName(t int64) string {
	L := v.Layout
	switch t {
	case L.TNone:
		return "NONE"
	case L.TObject:
		return "OBJECT"
	case L.TClass:
		return "CLASS"
	case L.TModule:
		return "MODULE"
	case L.TFloat:
		return "FLOAT"
	case L.TString:
		return "STRING"
	case L.TRegexp:
		return "REGEXP"
	case L.TArray:
		return "ARRAY"
	case L.THash:
		return "HASH"
	case L.TStruct:
		return "STRUCT"
	case L.TBignum:
		return "BIGNUM"
	case L.TFile:
		return "FILE"
	case L.TData:
		return "DATA"
	case L.TMatch:
		return "MATCH"
	case L.TComplex:
		return "COMPLEX"
	case L.TRational:
		return "RATIONAL"
	case L.TNil:
		return "NIL"
	case L.TTrue:
		return "TRUE"
	case L.TFalse:
		return "FALSE"
	case L.TSymbol:
		return "SYMBOL"
	case L.TFixnum:
		return "FIXNUM"
	case L.TUndef:
		return "UNDEF"
	case L.TImemo:
		return "IMEMO"
	case L.TNode:
		return "NODE"
	case L.TIClass:
		return "ICLASS"
	case L.TZombie:
		return "ZOMBIE"
	case L.TMoved:
		return "MOVED"
	}
	return fmt.Sprintf("UNKNOWN_%#x", t)
}

// pageAddrs returns the addresses of every struct heap_page.
func (v *VM) pageAddrs() ([]uint64, error) {
	objspace, err := v.Objspace()
	if err != nil {
		return nil, err
	}
	sorted, n, err := v.pageList(objspace)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	raw, err := v.m.read(sorted, int(n)*8)
	if err != nil {
		return nil, fmt.Errorf("reading the heap page list: %w", err)
	}
	pages := make([]uint64, n)
	for i := range pages {
		pages[i] = binary.LittleEndian.Uint64(raw[i*8:])
	}
	return pages, nil
}

// pageList reads objspace->heap_pages.sorted and allocated_pages, and
// returns the address of the first page pointer and their count. Since 3.4
// sorted points at a darray whose own length counts the pages.
func (v *VM) pageList(objspace uint64) (sorted, n uint64, err error) {
	L := v.Layout
	if sorted, err = v.m.u64(at(objspace, L.ObjspaceSortedPages)); err != nil {
		return 0, 0, fmt.Errorf("reading the heap page list: %w", err)
	}
	if L.SortedDarrayData >= 0 {
		if sorted == 0 || sorted&7 != 0 {
			return 0, 0, fmt.Errorf("the heap page list is at %#x: %w", sorted, ErrGarbage)
		}
		if n, err = v.m.u64(at(sorted, L.SortedDarrayLen)); err != nil {
			return 0, 0, fmt.Errorf("reading the heap page count: %w", err)
		}
		sorted = at(sorted, L.SortedDarrayData)
	} else if n, err = v.m.u64(at(objspace, L.ObjspaceAllocatedPages)); err != nil {
		return 0, 0, fmt.Errorf("reading the heap page count: %w", err)
	}
	if n > maxHeapPages || (n > 0 && (sorted == 0 || sorted&7 != 0)) {
		return 0, 0, fmt.Errorf("objspace claims %d heap pages at %#x: %w", n, sorted, ErrGarbage)
	}
	return sorted, n, nil
}

// Objspace returns the VM's rb_objspace_t, from vm->objspace at the
// layout's offset (each patch release's own: 3.1.5 and 4.0.6 moved it).
// The first time, the object space must hold together (plausibleObjspace):
// when it does not, the layout does not fit this process, and the heap is
// not read through it.
func (v *VM) Objspace() (uint64, error) {
	vm, err := v.VMPtr()
	if err != nil {
		return 0, err
	}
	if !v.objspaceChecked {
		if err := v.plausibleObjspace(vm, v.Layout.VMObjspace); err != nil {
			return 0, v.refuseLayout(fmt.Errorf("vm->objspace (rb_vm_struct.objspace at %d) %w", v.Layout.VMObjspace, err))
		}
		v.objspaceChecked = true
	}
	objspace, err := v.m.u64(at(vm, v.Layout.VMObjspace))
	if err != nil {
		return 0, fmt.Errorf("reading the VM's objspace: %w", err)
	}
	if objspace == 0 || objspace&7 != 0 {
		return 0, fmt.Errorf("the VM's objspace pointer is %#x: %w", objspace, ErrGarbage)
	}
	return objspace, nil
}

// plausibleObjspace checks that vm+off points at an rb_objspace_t whose
// heap pages hold together: a page list of a sane count, each page's
// header sane (slot size a multiple of the base slot, slots that fit a
// page) with its slots in one mapping of the process (heap pages are
// mapped memory, whatever the allocator), and the pages sorted by
// address, as the GC keeps them. The error says what does not hold.
func (v *VM) plausibleObjspace(vm uint64, off int64) error {
	L := v.Layout
	objspace, err := v.m.u64(at(vm, off))
	if err != nil {
		return fmt.Errorf("cannot be read: %w", err)
	}
	if objspace == 0 || objspace&7 != 0 {
		return fmt.Errorf("is %#x, not an object space", objspace)
	}
	sorted, n, err := v.pageList(objspace)
	if err != nil {
		return fmt.Errorf("does not lead to a heap page list: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("leads to an object space of no heap pages")
	}
	check := min(n, maxCheckedPages)
	raw, err := v.m.read(sorted, int(check)*8)
	if err != nil {
		return fmt.Errorf("leads to a heap page list that cannot be read: %w", err)
	}
	maps := v.maps
	if v.live {
		if m, err := v.T.Mappings(); err == nil {
			maps = m
		}
	}
	var prev uint64
	for i := range int(check) {
		page := binary.LittleEndian.Uint64(raw[i*8:])
		if page == 0 {
			return fmt.Errorf("leads to a heap page list with a null page (%d of %d)", i, n)
		}
		hdr, err := v.m.read(page, pageHeaderLen(v.Layout))
		if err != nil {
			return fmt.Errorf("leads to heap page %d of %d at %#x, which cannot be read", i, n, page)
		}
		p, ok := pageHeader(v.Layout, hdr)
		if !ok || p.SlotSize%L.BaseSlotSize != 0 {
			return fmt.Errorf("leads to heap page %d of %d at %#x, whose header is not a heap page's", i, n, page)
		}
		m, ok := target.FindMapping(maps, p.Start)
		if !ok || p.End() > m.End {
			return fmt.Errorf("leads to heap page %d of %d, whose slots %#x-%#x lie outside one mapping", i, n, p.Start, p.End())
		}
		if p.Start <= prev {
			return fmt.Errorf("leads to a heap page list not sorted by address, as the GC keeps it (page %d of %d at %#x)", i, n, p.Start)
		}
		prev = p.Start
	}
	return nil
}

// maxCheckedPages bounds how many heap pages plausibleObjspace checks.
const maxCheckedPages = 16

// HeapPage is one heap page: Total slots of SlotSize bytes from Start.
type HeapPage struct {
	Start    uint64
	SlotSize int64
	Total    int64
}

// End returns one past the page's last slot.
func (p HeapPage) End() uint64 { return p.Start + uint64(p.SlotSize*p.Total) }

// pageHeaderLen is how many bytes of a struct heap_page pageHeader reads.
func pageHeaderLen(L *layout.Layout) int {
	return int(max(L.HeapPageSlotSize+2, L.HeapPageTotalSlots+2, L.HeapPageStart+8))
}

// pageHeader decodes the start of a struct heap_page (slot_size and
// total_slots are shorts); ok is false when it does not look sane.
func pageHeader(L *layout.Layout, hdr []byte) (p HeapPage, ok bool) {
	p = HeapPage{
		SlotSize: L.BaseSlotSize, // before 3.2 every slot is one RVALUE
		Total:    int64(int16(binary.LittleEndian.Uint16(hdr[L.HeapPageTotalSlots:]))),
		Start:    le64(hdr, L.HeapPageStart),
	}
	if L.HeapPageSlotSize >= 0 {
		p.SlotSize = int64(int16(binary.LittleEndian.Uint16(hdr[L.HeapPageSlotSize:])))
	}
	ok = p.SlotSize >= L.BaseSlotSize && p.Total > 0 && p.SlotSize*p.Total <= maxPageBytes &&
		p.Start != 0 && p.Start <= ^uint64(0)-maxPageBytes
	return p, ok
}

// HeapPages reads the header of every heap page and returns the pages
// that look sane, sorted by address, and how many did not.
func (v *VM) HeapPages() ([]HeapPage, int, error) {
	pages, err := v.pageAddrs()
	if err != nil {
		return nil, 0, err
	}
	hdr := make([]byte, pageHeaderLen(v.Layout))
	out := make([]HeapPage, 0, len(pages))
	skipped := 0
	for _, page := range pages {
		if page == 0 || target.ReadFull(v.m.t, hdr, page) != nil {
			skipped++
			continue
		}
		p, ok := pageHeader(v.Layout, hdr)
		if !ok {
			skipped++
			continue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out, skipped, nil
}

// eachPage reads each page's slots in one piece and calls fn with them
// (the buffer is reused); pages that cannot be read are counted, not fatal.
func (v *VM) eachPage(pages []HeapPage, fn func(i int, p HeapPage, body []byte) error) (skipped int, err error) {
	var body []byte
	for i, p := range pages {
		n := int(p.SlotSize * p.Total)
		if cap(body) < n {
			body = make([]byte, n)
		}
		body = body[:n]
		if target.ReadFull(v.m.t, body, p.Start) != nil {
			skipped++
			continue
		}
		if err := fn(i, p, body); err != nil {
			return skipped, err
		}
	}
	return skipped, nil
}

// arySharedRootFlag returns RARRAY_SHARED_ROOT_FLAG: an array other arrays
// share, whose aux word counts them instead of holding its capacity.
func arySharedRootFlag(L *layout.Layout) uint64 {
	return 1 << uint64(L.FlUShift+L.RArraySharedRootUser)
}

// OutOfSlot returns the bytes a String or Array keeps in a malloc'd
// buffer of its own (not embedded, not shared), as the census counts them.
func (v *VM) OutOfSlot(typ, flags uint64, slot []byte) uint64 {
	L := v.Layout
	if flags&uint64(L.FlEltsShared) != 0 {
		return 0
	}
	switch {
	case typ == uint64(L.TString) && !StrHeader(L, slot, flags).Embedded:
		if capa := le64(slot, L.RStringHeapCapa); capa < MaxOutOfSlot {
			return capa
		}
	case typ == uint64(L.TArray) && !AryHeader(L, slot, flags).Embedded:
		capa := le64(slot, L.RArrayHeapCapa)
		if flags&arySharedRootFlag(v.Layout) != 0 {
			capa = AryHeader(L, slot, flags).Length // aux counts the sharers
		}
		if capa < MaxOutOfSlot/8 {
			return capa * 8
		}
	}
	return 0
}

// HeapCensus walks every heap page and counts live objects by type and by
// class (obj.class: singleton classes and include wrappers skipped). Each
// page is read in one piece. The process should be paused: a running
// process may free pages under the walk (they are then skipped and counted
// in SkippedPages) and move objects between them.
func (v *VM) HeapCensus() (*Census, error) {
	if err := v.Supports(layout.FeatureCensus); err != nil {
		return nil, err
	}
	L := v.Layout
	pages, badHeaders, err := v.HeapPages()
	if err != nil {
		return nil, err
	}
	c := &Census{SkippedPages: badHeaders}
	agg := map[censusKey]*censusAgg{}
	var (
		tmask    = uint64(L.TMask)
		tNone    = uint64(L.TNone)
		tZombie  = uint64(L.TZombie)
		tMoved   = uint64(L.TMoved)
		tImemo   = uint64(L.TImemo)
		tNode    = uint64(L.TNode)
		klassOff = L.RBasicKlass
		flagsOff = L.RBasicFlags
	)
	// The last (type, klass) seen: neighbouring slots often hold objects
	// of one kind, and a hit saves a map lookup.
	var lastKey censusKey
	var last *censusAgg
	skipped, _ := v.eachPage(pages, func(_ int, p HeapPage, body []byte) error {
		c.Pages++
		c.Slots += uint64(p.Total)
		ss := uint64(p.SlotSize)
		for off := int64(0); off < int64(len(body)); off += p.SlotSize {
			flags := binary.LittleEndian.Uint64(body[off+flagsOff:])
			typ := flags & tmask
			switch typ {
			case tNone:
				c.Free++
				continue
			case tZombie:
				c.Zombies++
				continue
			case tMoved:
				c.Moved++
				continue
			}
			klass := binary.LittleEndian.Uint64(body[off+klassOff:])
			if typ == tImemo || typ == tNode {
				klass = 0 // not a class: IMEMOs keep other data there
			}
			k := censusKey{int64(typ), klass}
			if last == nil || k != lastKey {
				a, ok := agg[k]
				if !ok {
					a = &censusAgg{}
					agg[k] = a
				}
				last, lastKey = a, k
			}
			last.count++
			last.bytes += ss + v.OutOfSlot(typ, flags, body[off:off+p.SlotSize])
		}
		return nil
	})
	c.SkippedPages += skipped
	// Name the classes while the process is still as it was walked.
	names := map[uint64]string{}
	byClass := map[[2]string]*CensusRow{}
	byType := map[string]*CensusRow{}
	for k, a := range agg {
		name, ok := names[k.klass]
		if !ok {
			name = v.ObjectClassName(k.klass)
			names[k.klass] = name
		}
		tn := v.TypeName(k.typ)
		r := byClass[[2]string{tn, name}]
		if r == nil {
			r = &CensusRow{Type: tn, Class: name}
			byClass[[2]string{tn, name}] = r
		}
		r.Count += a.count
		r.Bytes += a.bytes
		t := byType[tn]
		if t == nil {
			t = &CensusRow{Type: tn}
			byType[tn] = t
		}
		t.Count += a.count
		t.Bytes += a.bytes
		c.Objects += a.count
		c.Bytes += a.bytes
	}
	for _, r := range byType {
		c.ByType = append(c.ByType, *r)
	}
	for _, r := range byClass {
		c.ByClass = append(c.ByClass, *r)
	}
	sortRows(c.ByType)
	sortRows(c.ByClass)
	return c, nil
}

// sortRows orders rows largest first: bytes, then count, then type and class.
func sortRows(rows []CensusRow) {
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Bytes != b.Bytes {
			return a.Bytes > b.Bytes
		}
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		return a.Class < b.Class
	})
}

// maxSuperChain bounds the walk from a singleton class or include wrapper
// up to the real class.
const maxSuperChain = 64

// ObjectClassName names what obj.class returns for an object whose
// RBasic.klass is klass: singleton classes and ICLASSes are skipped through
// their superclass. It is "" for klass 0 (a hidden object) and
// "#<Class:0x...>" for an anonymous class.
func (v *VM) ObjectClassName(klass uint64) string {
	L := v.Layout
	if klass == 0 {
		return ""
	}
	k := klass
	for i := 0; i < maxSuperChain; i++ {
		typ, flags, err := v.objType(k)
		if err != nil {
			return fmt.Sprintf("#<unreadable class %#x>", klass)
		}
		if typ != L.TIClass && flags&uint64(L.FlSingleton) == 0 {
			break
		}
		sup, err := v.m.u64(at(k, L.RClassSuper))
		if err != nil || sup == 0 {
			return fmt.Sprintf("#<unreadable class %#x>", klass)
		}
		k = sup
	}
	typ, _, err := v.objType(k)
	if err != nil || (typ != L.TClass && typ != L.TModule) {
		return fmt.Sprintf("#<unreadable class %#x>", klass)
	}
	if n := v.ClassName(k); n != "" {
		return n
	}
	if typ == L.TModule {
		return fmt.Sprintf("#<Module:%#x>", k)
	}
	return fmt.Sprintf("#<Class:%#x>", k)
}
