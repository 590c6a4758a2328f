package heap

import (
	"errors"
	"fmt"
	"math"

	"github.com/rbscope/rbscope/internal/rawfile"
)

// indexVersion is the version of the form WriteIndex writes; ReadIndex
// refuses any other.
const indexVersion = 6

// indexHead is an index's first part: a Graph's small fields, the
// DomTree's totals and the lengths of the large arrays, which follow it
// as they are in memory (rawfile), to be used in place from the file
// mapped into memory: a dump of millions of objects opens again in the
// time it takes to check them, where decoding them took seconds.
type indexHead struct {
	Version  int
	Endian   uint32
	Name     string
	Roots    []Root
	Dangling int
	Bytes    uint64

	Objects, NumRefs, TextBytes int
	// Ordered is true when the objects are in address order (no order
	// array follows).
	Ordered bool
	// NumReferrers and NumKids are the lengths of the referrers' and the
	// dominator tree's rows.
	NumReferrers, NumKids int
	// NumLines is how many line offsets follow (Graph.lineAt).
	NumLines int

	BigMemAt []uint32
	BigMem   []uint64
	Cons     []uint64

	Types     []string
	ClassAddr []uint64
	ClassName []string
	Strs      []string
	Sites     []Site

	Reachable      int
	ReachableBytes uint64
}

// endianMark reads 0x01020304 where it was written in this byte order.
const endianMark = 0x01020304

// WriteIndex writes g, its dominator tree d, the referrers r of g's
// objects (NewReverse) and d's rows c (Children) to w, in a form ReadIndex
// uses in place: about as large as all four in memory.
func WriteIndex(w *rawfile.Writer, g *Graph, d *DomTree, r *Reverse, c *Children) error {
	h := indexHead{Version: indexVersion, Endian: endianMark, Name: g.Name, Roots: g.Roots, Dangling: g.Dangling, Bytes: g.Bytes,
		Objects: len(g.addr), NumRefs: len(g.refs), TextBytes: len(g.text), Ordered: g.order == nil,
		NumReferrers: len(r.from), NumKids: len(c.kids), NumLines: len(g.lineAt),
		Types: g.types, ClassAddr: g.classAddr, ClassName: g.className, Strs: g.strs, Sites: g.sites,
		Reachable: d.Reachable, ReachableBytes: d.ReachableBytes}
	for i, m := range g.bigMem {
		h.BigMemAt = append(h.BigMemAt, i)
		h.BigMem = append(h.BigMem, m)
	}
	for k := range g.cons {
		h.Cons = append(h.Cons, k)
	}
	w.Gob(&h)
	rawfile.Put(w, g.addr)
	rawfile.Put(w, d.Retained)
	rawfile.Put(w, g.typ)
	rawfile.Put(w, g.class)
	rawfile.Put(w, g.site)
	rawfile.Put(w, g.detail)
	rawfile.Put(w, g.memsize)
	rawfile.Put(w, g.refStart)
	rawfile.Put(w, g.refs)
	rawfile.Put(w, d.idom)
	rawfile.Put(w, d.RetainedCount)
	rawfile.Put(w, g.order)
	rawfile.Put(w, r.start)
	rawfile.Put(w, r.from)
	rawfile.Put(w, c.start)
	rawfile.Put(w, c.kids)
	rawfile.Put(w, g.text)
	rawfile.Put(w, g.lineAt)
	rawfile.Put(w, g.gen)
	if err := w.Err(); err != nil {
		return fmt.Errorf("writing heap index: %w", err)
	}
	return nil
}

// ErrIndexVersion is the error of ReadIndex on an index another version
// of rbscope wrote.
var ErrIndexVersion = errors.New("heap index of another version")

// ReadIndex reads what WriteIndex wrote, its arrays used in place (they
// live as long as r's bytes; a write to them changes those bytes). Every
// number is checked against the arrays it indexes, so a damaged index is
// an error, never a panic.
func ReadIndex(r *rawfile.Reader) (*Graph, *DomTree, *Reverse, *Children, error) {
	var h indexHead
	r.Gob(&h)
	if err := r.Err(); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("reading heap index: %w", err)
	}
	if h.Version != indexVersion || h.Endian != endianMark {
		return nil, nil, nil, nil, fmt.Errorf("%w (version %d, want %d)", ErrIndexVersion, h.Version, indexVersion)
	}
	n := h.Objects
	if n < 0 || n >= math.MaxUint32-1 {
		return nil, nil, nil, nil, errors.New("reading heap index: damaged: object count")
	}
	g := &Graph{
		Name: h.Name, Roots: h.Roots, Dangling: h.Dangling, Bytes: h.Bytes,
		bigMem: make(map[uint32]uint64, len(h.BigMem)),
		types:  h.Types, classAddr: h.ClassAddr, className: h.ClassName, strs: h.Strs, sites: h.Sites,
	}
	d := &DomTree{g: g, Reachable: h.Reachable, ReachableBytes: h.ReachableBytes}
	rev, kids := &Reverse{}, &Children{n: n}
	g.addr = rawfile.Take[uint64](r, n)
	d.Retained = rawfile.Take[uint64](r, n)
	g.typ = rawfile.Take[uint8](r, n)
	g.class = rawfile.Take[uint32](r, n)
	g.site = rawfile.Take[uint32](r, n)
	g.detail = rawfile.Take[uint32](r, n)
	g.memsize = rawfile.Take[uint32](r, n)
	g.refStart = rawfile.Take[uint32](r, n+1)
	g.refs = rawfile.Take[uint32](r, h.NumRefs)
	d.idom = rawfile.Take[uint32](r, n)
	d.RetainedCount = rawfile.Take[uint32](r, n)
	if !h.Ordered {
		g.order = rawfile.Take[uint32](r, n)
	} else {
		rawfile.Take[uint32](r, 0)
	}
	rev.start = rawfile.Take[uint32](r, n+1)
	rev.from = rawfile.Take[uint32](r, h.NumReferrers)
	kids.start = rawfile.Take[uint32](r, n+2)
	kids.kids = rawfile.Take[uint32](r, h.NumKids)
	g.text = rawfile.Take[uint8](r, h.TextBytes)
	g.lineAt = rawfile.Take[int64](r, h.NumLines)
	g.gen = rawfile.Take[uint32](r, n)
	if err := r.Err(); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("reading heap index: %w", err)
	}
	if len(h.BigMemAt) != len(h.BigMem) {
		return nil, nil, nil, nil, errors.New("reading heap index: damaged: memsizes")
	}
	if msg := check(g, d, rev, kids, &h); msg != "" {
		return nil, nil, nil, nil, fmt.Errorf("reading heap index: damaged: %s", msg)
	}
	for k, i := range h.BigMemAt {
		g.bigMem[i] = h.BigMem[k]
	}
	if len(h.Cons) > 0 {
		g.cons = make(map[uint64]struct{}, len(h.Cons))
		for _, k := range h.Cons {
			g.cons[k] = struct{}{}
		}
	}
	return g, d, rev, kids, nil
}

// check returns what is inconsistent in an index read back, or "": every
// number that indexes an array is in its bounds, the rows' bounds rise,
// and the addresses rise strictly in address order (no address twice).
// The large arrays are checked in parallel.
func check(g *Graph, d *DomTree, rev *Reverse, kids *Children, h *indexHead) string {
	n := len(g.addr)
	if len(g.classAddr) == 0 || len(g.className) != len(g.classAddr) || len(g.types) == 0 || len(g.types) > 256 ||
		len(g.strs) == 0 || len(g.sites) == 0 {
		return "array lengths"
	}
	if len(g.lineAt) > (n+lineEvery-1)/lineEvery {
		return "line offsets"
	}
	for k := range g.lineAt {
		if g.lineAt[k] < 0 || k > 0 && g.lineAt[k] <= g.lineAt[k-1] {
			return "line offsets"
		}
	}
	if msg := rows(g.refStart, len(g.refs), "reference bounds"); msg != "" {
		return msg
	}
	if msg := rows(rev.start, len(rev.from), "referrer bounds"); msg != "" {
		return msg
	}
	if msg := rows(kids.start, len(kids.kids), "dominator tree bounds"); msg != "" {
		return msg
	}
	kinds := g.detailKinds()
	if msg := rawfile.Check(n, func(lo, hi int) string {
		for i := lo; i < hi; i++ {
			if g.refStart[i] > g.refStart[i+1] || rev.start[i] > rev.start[i+1] || kids.start[i] > kids.start[i+1] {
				return "row bounds"
			}
			if int(g.typ[i]) >= len(g.types) || int(g.class[i]) >= len(g.classAddr) || int(g.site[i]) >= len(g.sites) {
				return "object fields"
			}
			if d := d.idom[i]; d != unreachable && int(d) > n {
				return "dominators"
			}
			if !g.detailOK(i, &kinds) {
				return "object details"
			}
			k := i
			if g.order != nil {
				k = int(g.order[i])
				if k >= n {
					return "address order"
				}
			}
			if i > 0 {
				prev := i - 1
				if g.order != nil {
					if prev = int(g.order[i-1]); prev >= n {
						return "address order"
					}
				}
				if g.addr[prev] >= g.addr[k] {
					return "address order"
				}
			}
		}
		return ""
	}); msg != "" {
		return msg
	}
	if kids.start[n] > kids.start[n+1] {
		return "dominator tree bounds"
	}
	for _, s := range [][]uint32{g.refs, rev.from, kids.kids} {
		if msg := rawfile.Check(len(s), func(lo, hi int) string {
			for _, x := range s[lo:hi] {
				if int(x) >= n {
					return "object numbers"
				}
			}
			return ""
		}); msg != "" {
			return msg
		}
	}
	for _, r := range g.Roots {
		for _, x := range r.Refs {
			if int(x) >= n {
				return "roots"
			}
		}
	}
	for _, i := range h.BigMemAt {
		if int(i) >= n {
			return "memsizes"
		}
	}
	for _, k := range h.Cons {
		if int(k>>32) >= n || int(uint32(k)) >= n {
			return "conservative references"
		}
	}
	return ""
}

// rows checks the ends of a row bounds array over m values: it starts at
// 0 and ends at m (the bounds between are checked with the objects).
func rows(start []uint32, m int, what string) string {
	if len(start) == 0 || start[0] != 0 || int(start[len(start)-1]) != m {
		return what
	}
	return ""
}

// What an object's detail indexes, by its type (detailKinds).
const (
	detailNone  = iota
	detailText  // text: a length byte, then the bytes
	detailClass // strs, the real-name bit aside
	detailName  // strs
)

// detailKinds returns what the detail of an object of each type code
// indexes, as Describe reads it.
func (g *Graph) detailKinds() (k [256]uint8) {
	for c, t := range g.types[:min(len(g.types), 256)] {
		switch t {
		case "STRING", "SYMBOL":
			k[c] = detailText
		case "CLASS", "MODULE", "ICLASS":
			k[c] = detailClass
		case "IMEMO", "DATA":
			k[c] = detailName
		}
	}
	return k
}

// detailOK tells whether object i's detail indexes what Describe reads;
// kinds is detailKinds().
func (g *Graph) detailOK(i int, kinds *[256]uint8) bool {
	d := g.detail[i]
	if d == 0 {
		return true
	}
	switch kinds[g.typ[i]] {
	case detailText:
		return int(d) < len(g.text) && int(d)+1+int(g.text[d]&0x7f) <= len(g.text)
	case detailClass:
		return int(d&^realNameBit) < len(g.strs)
	case detailName:
		return int(d) < len(g.strs)
	}
	return true
}
