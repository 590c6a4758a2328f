package heap

import (
	"bufio"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"
)

// indexVersion is the version of the form WriteIndex writes; ReadIndex
// refuses any other.
const indexVersion = 3

// indexForm is what an index holds: a Graph's arrays as Load built them
// and the DomTree computed from it, so that a later ReadIndex has both
// without parsing the dump or walking the graph again. The lookup
// directory is rebuilt (a pass over the addresses).
type indexForm struct {
	Version  int
	Name     string
	Roots    []Root
	Dangling int
	Bytes    uint64

	Addr     []uint64
	Typ      []uint8
	Class    []uint32
	Site     []uint32
	Detail   []uint32
	Memsize  []uint32
	BigMemAt []uint32
	BigMem   []uint64
	RefStart []uint32
	Refs     []uint32
	Cons     []uint64

	Types     []string
	ClassAddr []uint64
	ClassName []string
	Strs      []string
	Text      []byte
	Sites     []Site
	LineAt    []int64

	Idom           []uint32
	Retained       []uint64
	RetainedCount  []uint32
	Reachable      int
	ReachableBytes uint64
}

// indexHead is an index's first part, encoded with encoding/gob: the
// form's small fields and the lengths of its large arrays, which follow
// it as they are in memory (little-endian, the byte order of every
// platform rbscope runs on; Endian says which wrote it): read back at the
// speed of the disk, where gob's variable-length numbers took seconds for
// a dump of millions of objects.
type indexHead struct {
	Version  int
	Endian   uint32
	Name     string
	Roots    []Root
	Dangling int
	Bytes    uint64

	Objects, NumRefs, TextBytes int

	BigMemAt []uint32
	BigMem   []uint64
	Cons     []uint64

	Types     []string
	ClassAddr []uint64
	ClassName []string
	Strs      []string
	Sites     []Site
	LineAt    []int64

	Reachable      int
	ReachableBytes uint64
}

// endianMark reads 0x01020304 where it was written in this byte order.
const endianMark = 0x01020304

// WriteIndex writes g and its dominator tree d in a form ReadIndex reads
// back, about as large as the Graph in memory.
func WriteIndex(w io.Writer, g *Graph, d *DomTree) error {
	f := indexForm{
		Version: indexVersion, Name: g.Name, Roots: g.Roots, Dangling: g.Dangling, Bytes: g.Bytes,
		Addr: g.addr, Typ: g.typ, Class: g.class, Site: g.site, Detail: g.detail, Memsize: g.memsize,
		RefStart: g.refStart, Refs: g.refs,
		Types: g.types, ClassAddr: g.classAddr, ClassName: g.className, Strs: g.strs, Text: g.text, Sites: g.sites, LineAt: g.lineAt,
		Idom: d.idom, Retained: d.Retained, RetainedCount: d.RetainedCount, Reachable: d.Reachable, ReachableBytes: d.ReachableBytes,
	}
	for i, m := range g.bigMem {
		f.BigMemAt = append(f.BigMemAt, i)
		f.BigMem = append(f.BigMem, m)
	}
	for k := range g.cons {
		f.Cons = append(f.Cons, k)
	}
	return encodeForm(w, &f)
}

func encodeForm(w io.Writer, f *indexForm) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	h := indexHead{Version: f.Version, Endian: endianMark, Name: f.Name, Roots: f.Roots, Dangling: f.Dangling, Bytes: f.Bytes,
		Objects: len(f.Addr), NumRefs: len(f.Refs), TextBytes: len(f.Text),
		BigMemAt: f.BigMemAt, BigMem: f.BigMem, Cons: f.Cons,
		Types: f.Types, ClassAddr: f.ClassAddr, ClassName: f.ClassName, Strs: f.Strs, Sites: f.Sites, LineAt: f.LineAt,
		Reachable: f.Reachable, ReachableBytes: f.ReachableBytes}
	err := gob.NewEncoder(bw).Encode(&h)
	for _, a := range []func() error{
		func() error { return writeRaw(bw, f.Addr) }, func() error { return writeRaw(bw, f.Typ) },
		func() error { return writeRaw(bw, f.Class) }, func() error { return writeRaw(bw, f.Site) },
		func() error { return writeRaw(bw, f.Detail) }, func() error { return writeRaw(bw, f.Memsize) },
		func() error { return writeRaw(bw, f.RefStart) }, func() error { return writeRaw(bw, f.Refs) },
		func() error { return writeRaw(bw, f.Idom) }, func() error { return writeRaw(bw, f.Retained) },
		func() error { return writeRaw(bw, f.RetainedCount) }, func() error { return writeRaw(bw, f.Text) },
	} {
		if err == nil {
			err = a()
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("writing heap index: %w", err)
	}
	return nil
}

// writeRaw writes s as it is in memory.
func writeRaw[T uint8 | uint32 | uint64](w io.Writer, s []T) error {
	if len(s) == 0 {
		return nil
	}
	_, err := w.Write(unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0]))))
	return err
}

// readRaw reads n values that writeRaw wrote, a chunk at a time, so that
// a damaged length in a cut file fails at the file's end rather than
// asking for memory it never fills.
func readRaw[T uint8 | uint32 | uint64](r io.Reader, n int) ([]T, error) {
	if n < 0 || n > math.MaxUint32 {
		return nil, errors.New("array length")
	}
	const chunk = 1 << 20
	s := make([]T, 0, min(n, chunk))
	for len(s) < n {
		k := min(n-len(s), chunk)
		s = append(s, make([]T, k)...)
		part := s[len(s)-k:]
		if _, err := io.ReadFull(r, unsafe.Slice((*byte)(unsafe.Pointer(&part[0])), k*int(unsafe.Sizeof(part[0])))); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ErrIndexVersion is the error of ReadIndex on an index another version
// of rbscope wrote.
var ErrIndexVersion = errors.New("heap index of another version")

// ReadIndex reads what WriteIndex wrote. Every number is checked against
// the arrays it indexes, so a damaged index is an error, never a panic.
func ReadIndex(r io.Reader) (*Graph, *DomTree, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var h indexHead
	if err := gob.NewDecoder(br).Decode(&h); err != nil {
		return nil, nil, fmt.Errorf("reading heap index: %w", err)
	}
	if h.Version != indexVersion || h.Endian != endianMark {
		return nil, nil, fmt.Errorf("%w (version %d, want %d)", ErrIndexVersion, h.Version, indexVersion)
	}
	f := indexForm{Version: h.Version, Name: h.Name, Roots: h.Roots, Dangling: h.Dangling, Bytes: h.Bytes,
		BigMemAt: h.BigMemAt, BigMem: h.BigMem, Cons: h.Cons,
		Types: h.Types, ClassAddr: h.ClassAddr, ClassName: h.ClassName, Strs: h.Strs, Sites: h.Sites, LineAt: h.LineAt,
		Reachable: h.Reachable, ReachableBytes: h.ReachableBytes}
	n := h.Objects
	var err error
	read := func(do func() error) {
		if err == nil {
			err = do()
		}
	}
	read(func() (e error) { f.Addr, e = readRaw[uint64](br, n); return })
	read(func() (e error) { f.Typ, e = readRaw[uint8](br, n); return })
	read(func() (e error) { f.Class, e = readRaw[uint32](br, n); return })
	read(func() (e error) { f.Site, e = readRaw[uint32](br, n); return })
	read(func() (e error) { f.Detail, e = readRaw[uint32](br, n); return })
	read(func() (e error) { f.Memsize, e = readRaw[uint32](br, n); return })
	read(func() (e error) { f.RefStart, e = readRaw[uint32](br, n+1); return })
	read(func() (e error) { f.Refs, e = readRaw[uint32](br, h.NumRefs); return })
	read(func() (e error) { f.Idom, e = readRaw[uint32](br, n); return })
	read(func() (e error) { f.Retained, e = readRaw[uint64](br, n); return })
	read(func() (e error) { f.RetainedCount, e = readRaw[uint32](br, n); return })
	read(func() (e error) { f.Text, e = readRaw[uint8](br, h.TextBytes); return })
	if err != nil {
		return nil, nil, fmt.Errorf("reading heap index: %w", err)
	}
	if msg := f.check(); msg != "" {
		return nil, nil, fmt.Errorf("reading heap index: damaged: %s", msg)
	}
	g := &Graph{
		Name: f.Name, Roots: f.Roots, Dangling: f.Dangling, Bytes: f.Bytes,
		addr: f.Addr, typ: f.Typ, class: f.Class, site: f.Site, detail: f.Detail, memsize: f.Memsize,
		bigMem: make(map[uint32]uint64, len(f.BigMem)), refStart: f.RefStart, refs: f.Refs,
		types: f.Types, classAddr: f.ClassAddr, className: f.ClassName, strs: f.Strs, text: f.Text, sites: f.Sites, lineAt: f.LineAt,
	}
	for k, i := range f.BigMemAt {
		g.bigMem[i] = f.BigMem[k]
	}
	if len(f.Cons) > 0 {
		g.cons = make(map[uint64]struct{}, len(f.Cons))
		for _, k := range f.Cons {
			g.cons[k] = struct{}{}
		}
	}
	if dup := g.buildIndex(); dup >= 0 {
		return nil, nil, fmt.Errorf("reading heap index: damaged: address %#x twice", g.addr[dup])
	}
	d := &DomTree{g: g, idom: f.Idom, Retained: f.Retained, RetainedCount: f.RetainedCount,
		Reachable: f.Reachable, ReachableBytes: f.ReachableBytes}
	return g, d, nil
}

// check returns what is inconsistent in f, or "".
func (f *indexForm) check() string {
	n := len(f.Addr)
	if len(f.Typ) != n || len(f.Class) != n || len(f.Site) != n || len(f.Detail) != n || len(f.Memsize) != n ||
		len(f.RefStart) != n+1 || len(f.Idom) != n || len(f.Retained) != n || len(f.RetainedCount) != n ||
		len(f.BigMemAt) != len(f.BigMem) || len(f.ClassName) != len(f.ClassAddr) || len(f.ClassAddr) == 0 ||
		len(f.Types) == 0 || len(f.Strs) == 0 || len(f.Sites) == 0 || n >= math.MaxUint32-1 {
		return "array lengths"
	}
	if len(f.LineAt) != (n+lineEvery-1)/lineEvery {
		return "line offsets"
	}
	for k := 1; k < len(f.LineAt); k++ {
		if f.LineAt[k] <= f.LineAt[k-1] {
			return "line offsets"
		}
	}
	if len(f.LineAt) > 0 && f.LineAt[0] < 0 {
		return "line offsets"
	}
	if f.RefStart[0] != 0 || int(f.RefStart[n]) != len(f.Refs) {
		return "reference bounds"
	}
	for i := 0; i < n; i++ {
		if f.RefStart[i] > f.RefStart[i+1] {
			return "reference bounds"
		}
		if int(f.Typ[i]) >= len(f.Types) || int(f.Class[i]) >= len(f.ClassAddr) || int(f.Site[i]) >= len(f.Sites) {
			return "object fields"
		}
		if d := f.Idom[i]; d != unreachable && int(d) > n {
			return "dominators"
		}
		if !f.detailOK(i) {
			return "object details"
		}
	}
	for _, x := range f.Refs {
		if int(x) >= n {
			return "references"
		}
	}
	for _, r := range f.Roots {
		for _, x := range r.Refs {
			if int(x) >= n {
				return "roots"
			}
		}
	}
	for _, i := range f.BigMemAt {
		if int(i) >= n {
			return "memsizes"
		}
	}
	for _, k := range f.Cons {
		if int(k>>32) >= n || int(uint32(k)) >= n {
			return "conservative references"
		}
	}
	return ""
}

// detailOK tells whether object i's detail indexes what Describe reads.
func (f *indexForm) detailOK(i int) bool {
	d := f.Detail[i]
	if d == 0 {
		return true
	}
	switch f.Types[f.Typ[i]] {
	case "STRING", "SYMBOL":
		return int(d) < len(f.Text) && int(d)+1+int(f.Text[d]&0x7f) <= len(f.Text)
	case "CLASS", "MODULE", "ICLASS":
		return int(d&^realNameBit) < len(f.Strs)
	case "IMEMO", "DATA":
		return int(d) < len(f.Strs)
	}
	return true
}
