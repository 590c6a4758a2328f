package heap

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
)

// DomTree is the dominator tree of a dump's objects from a virtual
// super-root that references every object the ROOT lines reference:
// object d dominates object o when every path from the roots to o passes
// through d, so freeing d's last reference frees o too.
type DomTree struct {
	g *Graph
	// idom[i] is object i's immediate dominator: an object number, super
	// for the super-root, or unreachable.
	idom []uint32
	// Retained is the sum of the memsize of every object each object
	// dominates, itself included; RetainedCount counts them. Both are 0 for
	// objects no root reaches.
	Retained      []uint64
	RetainedCount []uint32
	// Reachable counts the objects the roots reach and ReachableBytes sums
	// their memsize.
	Reachable      int
	ReachableBytes uint64
}

const (
	unreachable = math.MaxUint32
	none        = math.MaxUint32
)

// Dominators computes the dominator tree of g with the Lengauer-Tarjan
// algorithm (path compression, O(E log N)), iteratively: no recursion,
// about 50 bytes per object and 4 per reference while it runs.
func Dominators(g *Graph) *DomTree {
	N := g.Len()
	super := uint32(N)
	// Predecessors, the super-root included, as CSR over N+1 nodes.
	predStart := make([]uint32, N+2)
	for _, w := range g.refs {
		predStart[w+1]++
	}
	for _, r := range g.Roots {
		for _, w := range r.Refs {
			predStart[w+1]++
		}
	}
	for i := 1; i < len(predStart); i++ {
		predStart[i] += predStart[i-1]
	}
	preds := make([]uint32, predStart[N+1])
	fill := make([]uint32, N+1)
	copy(fill, predStart[:N+1])
	for v := 0; v < N; v++ {
		for _, w := range g.Refs(v) {
			preds[fill[w]] = uint32(v)
			fill[w]++
		}
	}
	for _, r := range g.Roots {
		for _, w := range r.Refs {
			preds[fill[w]] = super
			fill[w]++
		}
	}
	fill = nil

	// Depth-first numbering from the super-root. dfn[v] = number+1, 0
	// when unvisited.
	dfn := make([]uint32, N+1)
	vertex := make([]uint32, 0, N+1)
	parent := make([]uint32, 0, N+1)
	type frame struct {
		v    uint32
		root int // for the super-root: the ROOT line being walked
		pos  uint32
	}
	dfn[super] = 1
	vertex = append(vertex, super)
	parent = append(parent, none)
	stack := []frame{{v: super}}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		var next uint32 = none
		if top.v == super {
			for top.root < len(g.Roots) {
				refs := g.Roots[top.root].Refs
				if top.pos < uint32(len(refs)) {
					w := refs[top.pos]
					top.pos++
					if dfn[w] == 0 {
						next = w
						break
					}
					continue
				}
				top.root++
				top.pos = 0
			}
		} else {
			end := g.refStart[top.v+1]
			for p := g.refStart[top.v] + top.pos; p < end; p++ {
				top.pos++
				if w := g.refs[p]; dfn[w] == 0 {
					next = w
					break
				}
			}
		}
		if next == none {
			stack = stack[:len(stack)-1]
			continue
		}
		parent = append(parent, dfn[top.v]-1)
		vertex = append(vertex, next)
		dfn[next] = uint32(len(vertex))
		stack = append(stack, frame{v: next})
	}
	stack = nil
	n := len(vertex)

	semi := make([]uint32, n)
	label := make([]uint32, n)
	ancestor := make([]uint32, n)
	idom := make([]uint32, n)
	bucketHead := make([]uint32, n)
	bucketNext := make([]uint32, n)
	for w := range n {
		semi[w] = uint32(w)
		label[w] = uint32(w)
		ancestor[w] = none
		bucketHead[w] = none
	}
	var chain []uint32
	eval := func(v uint32) uint32 {
		if ancestor[v] == none {
			return v
		}
		// compress(v), iteratively: walk up while the ancestor has an
		// ancestor, then fold labels down from the top.
		chain = chain[:0]
		for x := v; ancestor[ancestor[x]] != none; x = ancestor[x] {
			chain = append(chain, x)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			y := chain[i]
			a := ancestor[y]
			if semi[label[a]] < semi[label[y]] {
				label[y] = label[a]
			}
			ancestor[y] = ancestor[a]
		}
		return label[v]
	}
	for w := n - 1; w >= 1; w-- {
		node := vertex[w]
		for _, v := range preds[predStart[node]:predStart[node+1]] {
			if dfn[v] == 0 {
				continue
			}
			if u := eval(dfn[v] - 1); semi[u] < semi[w] {
				semi[w] = semi[u]
			}
		}
		s := semi[w]
		bucketNext[w] = bucketHead[s]
		bucketHead[s] = uint32(w)
		p := parent[w]
		ancestor[w] = p
		for v := bucketHead[p]; v != none; v = bucketNext[v] {
			if u := eval(v); semi[u] < semi[v] {
				idom[v] = u
			} else {
				idom[v] = p
			}
		}
		bucketHead[p] = none
	}
	for w := 1; w < n; w++ {
		if idom[w] != semi[w] {
			idom[w] = idom[idom[w]]
		}
	}
	preds, predStart, semi, label, ancestor, bucketHead, bucketNext, parent = nil, nil, nil, nil, nil, nil, nil, nil

	d := &DomTree{
		g:             g,
		idom:          make([]uint32, N),
		Retained:      make([]uint64, N),
		RetainedCount: make([]uint32, N),
		Reachable:     n - 1,
	}
	for i := range d.idom {
		d.idom[i] = unreachable
	}
	for w := n - 1; w >= 1; w-- {
		v := vertex[w]
		m := g.Memsize(int(v))
		d.Retained[v] += m
		d.RetainedCount[v]++
		d.ReachableBytes += m
		up := vertex[idom[w]]
		d.idom[v] = up
		if up != super {
			d.Retained[up] += d.Retained[v]
			d.RetainedCount[up] += d.RetainedCount[v]
		}
	}
	return d
}

// Idom returns object i's immediate dominator: an object number, -1 for
// the super-root (no single object dominates i), or ok false when no root
// reaches i.
func (d *DomTree) Idom(i int) (idom int, ok bool) {
	switch v := d.idom[i]; {
	case v == unreachable:
		return 0, false
	case int(v) == d.g.Len():
		return -1, true
	default:
		return int(v), true
	}
}

// Retainer is an object and what it retains.
type Retainer struct {
	Hop
	Retained uint64
	Count    uint64
	Self     uint64
	// Idom is the immediate dominator's number, -1 for the super-root.
	Idom int
}

// Top returns the n objects that retain the most bytes, largest first.
func (d *DomTree) Top(n int) []Retainer {
	h := &topHeap{r: d.Retained}
	for i := range d.Retained {
		if d.idom[i] == unreachable {
			continue
		}
		if h.Len() < n {
			heap.Push(h, i)
		} else if n > 0 && h.less(h.idx[0], i) {
			h.idx[0] = i
			heap.Fix(h, 0)
		}
	}
	idx := h.idx
	slices.SortFunc(idx, func(a, b int) int {
		return cmp.Or(cmp.Compare(d.Retained[b], d.Retained[a]), cmp.Compare(a, b))
	})
	out := make([]Retainer, len(idx))
	for k, i := range idx {
		dom, _ := d.Idom(i)
		out[k] = Retainer{Hop: d.g.Hop(i), Retained: d.Retained[i], Count: uint64(d.RetainedCount[i]),
			Self: d.g.Memsize(i), Idom: dom}
	}
	return out
}

// topHeap is a min-heap of object numbers by retained size (ties: the
// later object is smaller, so earlier objects win).
type topHeap struct {
	r   []uint64
	idx []int
}

func (h *topHeap) less(a, b int) bool {
	if h.r[a] != h.r[b] {
		return h.r[a] < h.r[b]
	}
	return a > b
}
func (h *topHeap) Len() int           { return len(h.idx) }
func (h *topHeap) Less(i, j int) bool { return h.less(h.idx[i], h.idx[j]) }
func (h *topHeap) Swap(i, j int)      { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *topHeap) Push(x any)         { h.idx = append(h.idx, x.(int)) }
func (h *topHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}
