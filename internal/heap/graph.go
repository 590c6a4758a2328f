package heap

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Graph is a dump loaded into memory: objects are numbered 0..Len()-1 in
// the order of the file, references are object numbers, class names,
// types, allocation sites and short descriptions are interned. It takes a
// few dozen bytes per object plus 4 per reference.
type Graph struct {
	// Name is the file name given to Load.
	Name string
	// Roots are the dump's ROOT lines, in order.
	Roots []Root
	// Dangling counts references to addresses the dump has no line for.
	Dangling int
	// Bytes is the sum of every object's memsize.
	Bytes uint64

	addr     []uint64
	typ      []uint8
	class    []uint32 // class slot (index into classAddr); 0: none
	site     []uint32 // index into sites; 0: none
	detail   []uint32 // per type: text offset+1, length, name index...
	memsize  []uint32 // math.MaxUint32: look in bigMem
	bigMem   map[uint32]uint64
	refStart []uint32 // Len()+1 entries
	refs     []uint32
	// cons holds the references found by a conservative scan, as
	// from<<32|to
	cons map[uint64]struct{}

	types     []string
	classAddr []uint64 // class slot -> address
	className []string // class slot -> name, resolved after loading
	strs      []string // names (CLASS/MODULE, imemo types, DATA structs); [0] = ""
	text      []byte   // string prefixes: length byte (high bit: cut) then bytes
	sites     []Site
	order     []uint32 // object numbers by ascending address; nil when the file is in that order
	// gen is each object's GC generation at its allocation (the GC's
	// count then), noGeneration where the dump does not say (allocated
	// before allocation tracing began).
	gen []uint32
	// lineAt[k] is the byte offset in the dump of the line of object
	// k*lineEvery (Line reads an object's line from the nearest one)
	lineAt []int64
	// blocks is Lookup's directory, built on first use (an index read
	// back answers its first views without it).
	blocksOnce sync.Once
	blocks     map[uint64]blockRange
}

// Root is one ROOT line: the root set's name and the objects it references.
type Root struct {
	Name string
	Refs []uint32
}

// Site is an allocation site.
type Site struct {
	File string
	Line uint64
}

func (s Site) String() string { return s.File + ":" + strconv.FormatUint(s.Line, 10) }

// textPrefix is how many bytes of a String's value a Graph keeps.
const textPrefix = 40

const realNameBit = 1 << 31 // detail of a CLASS with no name: strs index of its real_class_name

// LoadFile loads the dump at path, plain or compressed (Open).
func LoadFile(path string) (*Graph, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Load(f, path)
}

// Load reads a whole dump from r; name (the file name) prefixes errors.
func Load(r io.Reader, name string) (*Graph, error) {
	g := &Graph{
		Name:      name,
		bigMem:    map[uint32]uint64{},
		types:     []string{"NONE"},
		classAddr: []uint64{0},
		strs:      []string{""},
		sites:     []Site{{}},
		text:      []byte{0}, // offset 0 unused: detail 0 means no text
		refStart:  []uint32{0},
	}
	typeCode := map[string]uint8{}
	classSlot := map[uint64]uint32{}
	strIndex := map[string]uint32{"": 0}
	siteIndex := map[Site]uint32{}
	var refAddrs []uint64
	var rootRefs [][]uint64
	consAddrs := map[uint32][]uint64{} // object -> its conservative references
	var lastType string
	var lastCode uint8
	var lastClass uint64
	var lastSlot uint32
	var lastSite Site
	var lastSiteIdx uint32

	str := func(s string) uint32 {
		if i, ok := strIndex[s]; ok {
			return i
		}
		i := uint32(len(g.strs))
		g.strs = append(g.strs, s)
		strIndex[s] = i
		return i
	}

	rd := NewReader(r, name)
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if rec.Type == "ROOT" {
			g.Roots = append(g.Roots, Root{Name: rec.Root})
			rootRefs = append(rootRefs, append([]uint64(nil), rec.References...))
			continue
		}
		n := len(g.addr)
		if n >= math.MaxUint32-1 {
			return nil, &Error{File: name, Line: rd.Line(), Msg: "too many objects"}
		}
		if n%lineEvery == 0 {
			g.lineAt = append(g.lineAt, rd.Offset())
		}
		g.addr = append(g.addr, rec.Address)

		if rec.Type != lastType {
			c, ok := typeCode[rec.Type]
			if !ok {
				if len(g.types) > 255 {
					return nil, &Error{File: name, Line: rd.Line(), Msg: fmt.Sprintf("not dump_all JSON: too many object types (%q)", rec.Type)}
				}
				c = uint8(len(g.types))
				g.types = append(g.types, rec.Type)
				typeCode[rec.Type] = c
			}
			lastType, lastCode = rec.Type, c
		}
		g.typ = append(g.typ, lastCode)

		slot := uint32(0)
		// An IMEMO's class word holds other things (Ruby 3.1 dumps it:
		// a call cache's receiver class, small integers).
		if rec.Class != 0 && rec.Type != "IMEMO" {
			if rec.Class != lastClass {
				s, ok := classSlot[rec.Class]
				if !ok {
					s = uint32(len(g.classAddr))
					g.classAddr = append(g.classAddr, rec.Class)
					classSlot[rec.Class] = s
				}
				lastClass, lastSlot = rec.Class, s
			}
			slot = lastSlot
		}
		g.class = append(g.class, slot)

		site := uint32(0)
		if rec.File != "" {
			s := Site{rec.File, rec.Line}
			if s != lastSite || lastSiteIdx == 0 {
				i, ok := siteIndex[s]
				if !ok {
					i = uint32(len(g.sites))
					g.sites = append(g.sites, s)
					siteIndex[s] = i
				}
				lastSite, lastSiteIdx = s, i
			}
			site = lastSiteIdx
		}
		g.site = append(g.site, site)
		gen := uint32(noGeneration)
		if site != 0 {
			gen = uint32(min(rec.Generation, noGeneration-1))
		}
		g.gen = append(g.gen, gen)

		var detail uint32
		switch rec.Type {
		case "STRING", "SYMBOL":
			if rec.HasValue && len(g.text) < math.MaxInt32 {
				detail = uint32(len(g.text))
				v := rec.Value
				cut := byte(0)
				if len(v) > textPrefix {
					n := textPrefix
					for n > 0 && !utf8.RuneStart(v[n]) {
						n--
					}
					v, cut = v[:n], 0x80
				}
				g.text = append(g.text, byte(len(v))|cut)
				g.text = append(g.text, v...)
			}
		case "ARRAY", "STRUCT":
			detail = clamp32(rec.Length)
		case "HASH":
			detail = clamp32(rec.Size)
		case "OBJECT":
			detail = clamp32(rec.Ivars)
		case "CLASS", "MODULE", "ICLASS":
			if rec.Name != "" {
				detail = str(rec.Name)
			} else if rec.RealClassName != "" {
				detail = str(rec.RealClassName) | realNameBit
			}
		case "IMEMO":
			detail = str(rec.ImemoType)
		case "DATA":
			detail = str(rec.Struct)
		}
		g.detail = append(g.detail, detail)

		g.Bytes += rec.Memsize
		if rec.Memsize >= math.MaxUint32 {
			g.bigMem[uint32(n)] = rec.Memsize
			g.memsize = append(g.memsize, math.MaxUint32)
		} else {
			g.memsize = append(g.memsize, uint32(rec.Memsize))
		}

		refAddrs = append(refAddrs, rec.References...)
		if len(rec.Conservative) > 0 {
			consAddrs[uint32(n)] = append([]uint64(nil), rec.Conservative...)
		}
		if len(refAddrs) >= math.MaxUint32 {
			return nil, &Error{File: name, Line: rd.Line(), Msg: "too many references"}
		}
		g.refStart = append(g.refStart, uint32(len(refAddrs)))
	}

	if dup := g.buildIndex(); dup >= 0 {
		return nil, fmt.Errorf("%s: not dump_all JSON: address %#x appears twice", name, g.addr[dup])
	}

	// Resolve references to object numbers, dropping dangling ones.
	resolve := func(refs []uint32, addrs []uint64) []uint32 {
		for _, a := range addrs {
			if j, ok := g.Lookup(a); ok {
				refs = append(refs, uint32(j))
			} else {
				g.Dangling++
			}
		}
		return refs
	}
	g.refs = make([]uint32, 0, len(refAddrs))
	start := uint32(0)
	for i := range g.addr {
		end := g.refStart[i+1]
		g.refStart[i] = uint32(len(g.refs))
		g.refs = resolve(g.refs, refAddrs[start:end])
		start = end
	}
	g.refStart[len(g.addr)] = uint32(len(g.refs))
	refAddrs = nil
	for k, addrs := range rootRefs {
		g.Roots[k].Refs = resolve(make([]uint32, 0, len(addrs)), addrs)
	}
	if len(consAddrs) > 0 {
		g.cons = map[uint64]struct{}{}
		for i, addrs := range consAddrs {
			for _, a := range addrs {
				if j, ok := g.Lookup(a); ok {
					g.cons[uint64(i)<<32|uint64(j)] = struct{}{}
				}
			}
		}
	}

	// Name the classes.
	g.className = make([]string, len(g.classAddr))
	for s, a := range g.classAddr {
		if s == 0 {
			continue
		}
		g.className[s] = fmt.Sprintf("#<Class:%#x>", a)
		if i, ok := g.Lookup(a); ok {
			if d := g.detail[i]; d != 0 && g.isClass(i) {
				g.className[s] = g.strs[d&^realNameBit]
			}
		}
	}
	shrink(&g.addr)
	shrink(&g.typ)
	shrink(&g.class)
	shrink(&g.site)
	shrink(&g.detail)
	shrink(&g.memsize)
	shrink(&g.refStart)
	shrink(&g.text)
	return g, nil
}

// lineEvery is how many objects apart the Graph keeps the offset of a
// line: 8 bytes per 256 objects, and at most 255 lines read to find one.
const lineEvery = 256

// ErrNoLines is the error of Record when the Graph does not know where
// its objects' lines are (an index of an earlier rbscope).
var ErrNoLines = errors.New("the heap index has no line offsets")

// Record reads object i's line from the dump the Graph was loaded from
// (dump, read at the offsets of its decompressed bytes as Load read them) with the
// instance variables (Record.InstanceVariables) kept. It reads from the
// nearest line whose offset the Graph keeps, at most lineEvery-1 lines
// more.
func (g *Graph) Record(dump *File, i int) (*Record, error) {
	if i < 0 || i >= len(g.addr) {
		return nil, fmt.Errorf("object %d: out of range", i)
	}
	k := i / lineEvery
	if k >= len(g.lineAt) {
		return nil, ErrNoLines
	}
	from, err := dump.From(g.lineAt[k])
	if err != nil {
		return nil, err
	}
	rd := NewReader(from, g.Name)
	rd.KeepInstanceVariables()
	for n := k * lineEvery; ; {
		rec, err := rd.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%s: object %d is past the end: the dump changed", g.Name, i)
		}
		if err != nil {
			return nil, err
		}
		if rec.Type == "ROOT" {
			continue
		}
		if n == i {
			if rec.Address != g.addr[i] {
				return nil, fmt.Errorf("%s: the line of object %d is of %#x, not %#x: the dump changed", g.Name, i, rec.Address, g.addr[i])
			}
			return rec, nil
		}
		n++
	}
}

// shrink drops the spare capacity of a slice that grew by appending.
func shrink[T any](s *[]T) {
	if cap(*s)-len(*s) > len(*s)/8 {
		*s = append([]T(nil), *s...)
	}
}

func clamp32(n uint64) uint32 {
	if n > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}

// blockShift groups addresses into 64 KiB blocks (a Ruby heap page) for
// the lookup directory.
const blockShift = 16

type blockRange struct{ lo, hi uint32 }

// buildIndex sorts the objects by address (a dump lists them in heap page
// order, already nearly sorted) and builds the block directory Lookup
// uses. It returns the number of an object whose address is another's, or
// -1.
func (g *Graph) buildIndex() int {
	n := len(g.addr)
	sorted := true
	for i := 1; i < n; i++ {
		if g.addr[i] <= g.addr[i-1] {
			sorted = false
			break
		}
	}
	g.order = nil
	if !sorted {
		g.order = make([]uint32, n)
		for i := range g.order {
			g.order[i] = uint32(i)
		}
		slices.SortFunc(g.order, func(x, y uint32) int { return cmp.Compare(g.addr[x], g.addr[y]) })
		for k := 1; k < n; k++ {
			if g.addr[g.order[k]] == g.addr[g.order[k-1]] {
				return int(g.order[k])
			}
		}
	}
	g.blocksOnce.Do(g.buildBlocks)
	return -1
}

// buildBlocks builds the block directory Lookup uses from the objects in
// address order.
func (g *Graph) buildBlocks() {
	n := len(g.addr)
	g.blocks = make(map[uint64]blockRange, n/1000+1)
	for k := 0; k < n; {
		b := g.sortedAddr(k) >> blockShift
		lo := k
		for k < n && g.sortedAddr(k)>>blockShift == b {
			k++
		}
		g.blocks[b] = blockRange{uint32(lo), uint32(k)}
	}
}

// sortedAddr returns the k-th smallest address.
func (g *Graph) sortedAddr(k int) uint64 {
	if g.order != nil {
		return g.addr[g.order[k]]
	}
	return g.addr[k]
}

// objectAt returns the number of the object at the k-th smallest address.
func (g *Graph) objectAt(k int) int {
	if g.order != nil {
		return int(g.order[k])
	}
	return k
}

// Lookup returns the number of the object at address a.
func (g *Graph) Lookup(a uint64) (int, bool) {
	g.blocksOnce.Do(g.buildBlocks)
	r, ok := g.blocks[a>>blockShift]
	if !ok {
		return 0, false
	}
	lo, hi := int(r.lo), int(r.hi)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if g.sortedAddr(m) < a {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < int(r.hi) && g.sortedAddr(lo) == a {
		if g.order != nil {
			return int(g.order[lo]), true
		}
		return lo, true
	}
	return 0, false
}

// Len returns the number of objects (ROOT lines excluded).
func (g *Graph) Len() int { return len(g.addr) }

// Address returns object i's address.
func (g *Graph) Address(i int) uint64 { return g.addr[i] }

// Type returns object i's type: STRING, ARRAY, ...
func (g *Graph) Type(i int) string { return g.types[g.typ[i]] }

// ClassName returns the name of object i's class: the class's name, the
// real class's name for an instance of a singleton class,
// "#<Class:0x...>" for an anonymous class or one not in the dump, "" when
// the object has no class (IMEMO, hidden objects).
func (g *Graph) ClassName(i int) string { return g.className[g.class[i]] }

// ClassAddress returns the address of object i's class, 0 if none.
func (g *Graph) ClassAddress(i int) uint64 { return g.classAddr[g.class[i]] }

// Memsize returns object i's memsize.
func (g *Graph) Memsize(i int) uint64 {
	m := g.memsize[i]
	if m == math.MaxUint32 {
		return g.bigMem[uint32(i)]
	}
	return uint64(m)
}

// Refs returns the objects object i references (do not modify).
func (g *Graph) Refs(i int) []uint32 { return g.refs[g.refStart[i]:g.refStart[i+1]] }

// Conservative reports whether object from references object to only
// through a word a conservative scan found (see Record.Conservative).
func (g *Graph) Conservative(from, to int) bool {
	if g.cons == nil {
		return false
	}
	_, ok := g.cons[uint64(from)<<32|uint64(to)]
	return ok
}

// numConservative returns how many references are conservative.
func (g *Graph) numConservative() int { return len(g.cons) }

// NumRefs returns the number of references between objects.
func (g *Graph) NumRefs() int { return len(g.refs) }

// Site returns where object i was allocated, if the dump says.
func (g *Graph) Site(i int) (Site, bool) {
	s := g.site[i]
	return g.sites[s], s != 0
}

// noGeneration is Graph.gen's value for an object without a generation.
const noGeneration = math.MaxUint32

// Generation returns the GC generation at which object i was allocated
// (GC.count then), when the dump says: objects allocated while
// allocation tracing was on (ObjectSpace.trace_object_allocations).
func (g *Graph) Generation(i int) (uint64, bool) {
	v := g.gen[i]
	return uint64(v), v != noGeneration
}

// HasSites tells whether any object has an allocation site.
func (g *Graph) HasSites() bool { return len(g.sites) > 1 }

func (g *Graph) isClass(i int) bool {
	switch g.Type(i) {
	case "CLASS", "MODULE", "ICLASS":
		return true
	}
	return false
}

// Describe returns a short description of object i: a String's value
// (quoted, cut after 40 bytes), an Array's length, a Class's name...
func (g *Graph) Describe(i int) string {
	d := g.detail[i]
	switch g.Type(i) {
	case "STRING", "SYMBOL":
		if d == 0 {
			// A shared String (a copy or substring) has no value of its
			// own: show the buffer it shares.
			if refs := g.Refs(i); g.Type(i) == "STRING" && len(refs) == 1 && g.Type(int(refs[0])) == "STRING" && g.detail[refs[0]] != 0 {
				return "shares " + g.Describe(int(refs[0]))
			}
			return ""
		}
		n := int(g.text[d] & 0x7f)
		v := string(g.text[d+1 : int(d)+1+n])
		q := strconv.Quote(v)
		if g.text[d]&0x80 != 0 {
			q = q[:len(q)-1] + `..."`
		}
		if g.Type(i) == "SYMBOL" {
			return ":" + q
		}
		return q
	case "ARRAY", "STRUCT":
		return "length " + strconv.FormatUint(uint64(d), 10)
	case "HASH":
		return "size " + strconv.FormatUint(uint64(d), 10)
	case "OBJECT":
		if d == 0 {
			return ""
		}
		return strconv.FormatUint(uint64(d), 10) + " ivars"
	case "CLASS", "MODULE", "ICLASS":
		if d == 0 {
			return "anonymous"
		}
		if d&realNameBit != 0 {
			return "singleton class of a " + g.strs[d&^realNameBit]
		}
		return g.strs[d]
	case "IMEMO", "DATA":
		return g.strs[d]
	}
	return ""
}
