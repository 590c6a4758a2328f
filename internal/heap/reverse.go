package heap

// Reverse is a graph's references turned around, in compressed rows: the
// objects that reference each object (Holders without a pass over the
// whole graph), 4 bytes per reference plus 4 per object.
type Reverse struct {
	start []uint32
	from  []uint32
}

// NewReverse builds the referrers of every object of g, each once.
func NewReverse(g *Graph) *Reverse {
	n := g.Len()
	return newCSR(n, func(emit func(to, from uint32)) {
		last := make([]uint32, n) // last[w] = 1 + the last object that emitted w
		for i := 0; i < n; i++ {
			for _, w := range g.Refs(i) {
				if last[w] != uint32(i)+1 {
					last[w] = uint32(i) + 1
					emit(w, uint32(i))
				}
			}
		}
	})
}

// Of returns the objects that reference object i, in file order (do not
// modify).
func (r *Reverse) Of(i int) []uint32 { return r.from[r.start[i]:r.start[i+1]] }

// Children is the dominator tree turned into rows: the objects each
// object immediately dominates, and those no single object dominates
// (the super-root's children).
type Children struct {
	start []uint32
	kids  []uint32
	n     int
}

// Children builds the rows of d's tree.
func (d *DomTree) Children() *Children {
	n := len(d.idom)
	c := newCSR(n+1, func(emit func(to, from uint32)) {
		for i, up := range d.idom {
			if up != unreachable {
				emit(up, uint32(i))
			}
		}
	})
	return &Children{start: c.start, kids: c.from, n: n}
}

// Of returns the objects object i immediately dominates; i = -1 asks for
// those of the super-root (do not modify).
func (c *Children) Of(i int) []uint32 {
	if i < 0 {
		i = c.n
	}
	return c.kids[c.start[i]:c.start[i+1]]
}

// newCSR builds rows over n nodes from the pairs each emits (two passes:
// count, then fill).
func newCSR(n int, each func(emit func(to, from uint32))) *Reverse {
	start := make([]uint32, n+1)
	each(func(to, _ uint32) { start[to+1]++ })
	for i := 1; i <= n; i++ {
		start[i] += start[i-1]
	}
	from := make([]uint32, start[n])
	fill := make([]uint32, n)
	copy(fill, start[:n])
	each(func(to, f uint32) {
		from[fill[to]] = f
		fill[to]++
	})
	return &Reverse{start: start, from: from}
}
