package heap

import (
	"bufio"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"math"
)

// indexVersion is the version of the form WriteIndex writes; ReadIndex
// refuses any other.
const indexVersion = 1

// indexForm is what WriteIndex encodes (with encoding/gob): a Graph's
// arrays as Load built them and the DomTree computed from it, so that a
// later ReadIndex has both without parsing the dump or walking the graph
// again. The lookup directory is rebuilt (a pass over the addresses).
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

	Idom           []uint32
	Retained       []uint64
	RetainedCount  []uint32
	Reachable      int
	ReachableBytes uint64
}

// WriteIndex writes g and its dominator tree d in a form ReadIndex reads
// back, about as large as the Graph in memory.
func WriteIndex(w io.Writer, g *Graph, d *DomTree) error {
	f := indexForm{
		Version: indexVersion, Name: g.Name, Roots: g.Roots, Dangling: g.Dangling, Bytes: g.Bytes,
		Addr: g.addr, Typ: g.typ, Class: g.class, Site: g.site, Detail: g.detail, Memsize: g.memsize,
		RefStart: g.refStart, Refs: g.refs,
		Types: g.types, ClassAddr: g.classAddr, ClassName: g.className, Strs: g.strs, Text: g.text, Sites: g.sites,
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
	if err := gob.NewEncoder(bw).Encode(f); err != nil {
		return fmt.Errorf("writing heap index: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing heap index: %w", err)
	}
	return nil
}

// ErrIndexVersion is the error of ReadIndex on an index another version
// of rbscope wrote.
var ErrIndexVersion = errors.New("heap index of another version")

// ReadIndex reads what WriteIndex wrote. Every number is checked against
// the arrays it indexes, so a damaged index is an error, never a panic.
func ReadIndex(r io.Reader) (*Graph, *DomTree, error) {
	var f indexForm
	if err := gob.NewDecoder(bufio.NewReaderSize(r, 1<<20)).Decode(&f); err != nil {
		return nil, nil, fmt.Errorf("reading heap index: %w", err)
	}
	if f.Version != indexVersion {
		return nil, nil, fmt.Errorf("%w (version %d, want %d)", ErrIndexVersion, f.Version, indexVersion)
	}
	if msg := f.check(); msg != "" {
		return nil, nil, fmt.Errorf("reading heap index: damaged: %s", msg)
	}
	g := &Graph{
		Name: f.Name, Roots: f.Roots, Dangling: f.Dangling, Bytes: f.Bytes,
		addr: f.Addr, typ: f.Typ, class: f.Class, site: f.Site, detail: f.Detail, memsize: f.Memsize,
		bigMem: make(map[uint32]uint64, len(f.BigMem)), refStart: f.RefStart, refs: f.Refs,
		types: f.Types, classAddr: f.ClassAddr, className: f.ClassName, strs: f.Strs, text: f.Text, sites: f.Sites,
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
