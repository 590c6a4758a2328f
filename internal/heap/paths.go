package heap

import (
	"math"
	"slices"
	"sync"
)

// Hop is one object on a path from the roots.
type Hop struct {
	Index   int
	Address uint64
	Type    string
	Class   string
	Desc    string
	// Conservative says the previous hop references this one only
	// through a word a conservative scan found.
	Conservative bool
}

// Path is a chain from a root to an object: Root (the ROOT line's name,
// such as "vm" or "global_tbl") references Hops[0], which references
// Hops[1], ...; the last hop is the object itself.
type Path struct {
	Root string
	Hops []Hop
}

// Hop describes object i.
func (g *Graph) Hop(i int) Hop {
	return Hop{Index: i, Address: g.addr[i], Type: g.Type(i), Class: g.ClassName(i), Desc: g.Describe(i)}
}

// Holders returns the objects that reference object target, each once,
// in file order.
func (g *Graph) Holders(target int) []int {
	var out []int
	for i := 0; i < g.Len(); i++ {
		if slices.Contains(g.Refs(i), uint32(target)) {
			out = append(out, i)
		}
	}
	return out
}

// Paths answers "who holds this": up to n shortest paths from the roots to
// object target, one per direct holder (a root set that references the
// object itself, or an object that does), shortest first. The path to a
// holder never passes through the target itself. Paths go through exact
// references where they can: a path needs a conservative reference (see
// Graph.Conservative) only when no other reaches that holder, and its hops
// say so. Paths returns nothing when no root reaches the target (garbage
// not yet collected).
func Paths(g *Graph, target, n int) []Path { return PathsIgnoring(g, target, n, nil) }

// PathsIgnoring is Paths through none of the objects ignore names: what
// else holds the target once those let it go (a cache the user knows of,
// a holder that is fine). With every holder ignored it returns nothing.
func PathsIgnoring(g *Graph, target, n int, ignore []int) []Path {
	if n <= 0 {
		return nil
	}
	avoid := make([]bool, g.Len())
	avoid[target] = true
	for _, i := range ignore {
		avoid[i] = true
	}
	var exact, all []uint32
	search := func(withConservative bool) []uint32 {
		if withConservative {
			if all == nil {
				all = g.parents(avoid, true)
			}
			return all
		}
		if exact == nil {
			exact = g.parents(avoid, false)
		}
		return exact
	}
	paths, _ := g.paths(target, n, g.Holders(target), func(h int) bool { return avoid[h] }, search, nil)
	return paths
}

// paths is PathsIgnoring's work over the given holders of target (those
// skip names left out), with the searches from the roots search gives
// (exact references only, or conservative ones too). With valid set, a
// holder's chain must pass it, or paths gives up (ok false).
func (g *Graph) paths(target, n int, holders []int, skip func(int) bool, search func(withConservative bool) []uint32, valid func(parent []uint32, h int) bool) (out []Path, ok bool) {
	var direct []Path
	for _, r := range g.Roots {
		if slices.Contains(r.Refs, uint32(target)) && !slices.ContainsFunc(direct, func(p Path) bool { return p.Root == r.Name }) {
			direct = append(direct, Path{Root: r.Name, Hops: []Hop{g.Hop(target)}})
		}
	}
	paths := direct
	for _, h := range holders {
		if len(paths) >= n && len(paths[0].Hops) == 1 {
			break // enough paths of length 1 already
		}
		if skip(h) {
			continue
		}
		parent := search(false)
		if parent[h] == unseen || g.Conservative(h, target) {
			parent = search(true)
		}
		if valid != nil && !valid(parent, h) {
			return nil, false
		}
		if parent[h] == unseen {
			continue
		}
		paths = append(paths, g.pathThrough(parent, h, []int{target}))
	}
	slices.SortStableFunc(paths, func(a, b Path) int { return len(a.Hops) - len(b.Hops) })
	if len(paths) > n {
		paths = paths[:n]
	}
	return paths, true
}

// PathSearch keeps one dump's searches from the roots (see parents), made
// on first use, so that the paths to each object cost a walk rather than
// a search of the whole graph (a second on 20 million objects): for an
// object whose holders' chains avoid it and the objects ignored, the
// chains of the unrestricted search are those a search that avoids them
// finds, breadth first from the same roots in the same order. Where a
// chain passes through one of them, it searches again as PathsIgnoring
// does. Safe for concurrent use.
type PathSearch struct {
	g          *Graph
	exact, all struct {
		once   sync.Once
		parent []uint32
	}
}

// NewPathSearch prepares the searches of g.
func NewPathSearch(g *Graph) *PathSearch { return &PathSearch{g: g} }

// search returns the kept search from the roots (exact references only,
// or conservative ones too), made on first use. The kept searches avoid
// nothing.
func (ps *PathSearch) search(withConservative bool) []uint32 {
	s := &ps.exact
	if withConservative {
		s = &ps.all
	}
	s.once.Do(func() { s.parent = ps.g.parents(make([]bool, ps.g.Len()), withConservative) })
	return s.parent
}

// Shortest returns one shortest path from the roots to each of targets
// that a root reaches (through exact references where they reach).
func (ps *PathSearch) Shortest(targets []int) map[int]Path {
	out := map[int]Path{}
	for _, t := range targets {
		parent := ps.search(false)
		if parent[t] == unseen {
			parent = ps.search(true)
		}
		if parent[t] != unseen {
			out[t] = ps.g.pathThrough(parent, t, nil)
		}
	}
	return out
}

// Paths is PathsIgnoring(g, target, n, ignore), given the target's holders
// in ascending order, each once (g.Holders' answer, or the reverse edges').
func (ps *PathSearch) Paths(target, n int, holders, ignore []int) []Path {
	if n <= 0 {
		return nil
	}
	g := ps.g
	avoid := map[int]bool{target: true}
	for _, i := range ignore {
		avoid[i] = true
	}
	valid := func(parent []uint32, h int) bool {
		N := uint32(g.Len())
		for v := uint32(h); v < N; v = parent[v] {
			if avoid[int(v)] {
				return false
			}
		}
		return true
	}
	if paths, ok := g.paths(target, n, holders, func(h int) bool { return avoid[h] }, ps.search, valid); ok {
		return paths
	}
	return PathsIgnoring(g, target, n, ignore)
}

const unseen = math.MaxUint32

// pathThrough is the path from the roots to object x along parent (a
// search's, see parents), followed by the objects after (x's own holder
// chain down to the target, innermost first).
func (g *Graph) pathThrough(parent []uint32, x int, after []int) Path {
	N := uint32(g.Len())
	chain := slices.Clone(after)
	v := uint32(x)
	for v < N {
		chain = append(chain, int(v))
		v = parent[v]
	}
	p := Path{Root: g.Roots[int(v-N)].Name}
	for i := len(chain) - 1; i >= 0; i-- {
		hop := g.Hop(chain[i])
		hop.Conservative = i < len(chain)-1 && g.Conservative(chain[i+1], chain[i])
		p.Hops = append(p.Hops, hop)
	}
	return p
}

// ShortestPaths returns one shortest path from the roots to each of
// targets that a root reaches, by one search for them all (through exact
// references where they reach, as Paths goes).
func ShortestPaths(g *Graph, targets []int) map[int]Path { return NewPathSearch(g).Shortest(targets) }

// parents runs a breadth-first search from the roots that never enters
// the objects avoid names and returns, for each object, the object it was
// first reached from (N+k for root k; unseen if none), following
// conservative references only when withConservative is set.
func (g *Graph) parents(avoid []bool, withConservative bool) []uint32 {
	N := g.Len()
	parent := make([]uint32, N)
	for i := range parent {
		parent[i] = unseen
	}
	queue := make([]uint32, 0, 1024)
	for k, r := range g.Roots {
		for _, o := range r.Refs {
			if !avoid[o] && parent[o] == unseen {
				parent[o] = uint32(N + k)
				queue = append(queue, o)
			}
		}
	}
	for q := 0; q < len(queue); q++ {
		v := queue[q]
		for _, w := range g.Refs(int(v)) {
			if parent[w] == unseen && !avoid[w] && (withConservative || !g.Conservative(int(v), int(w))) {
				parent[w] = v
				queue = append(queue, w)
			}
		}
	}
	return parent
}

// MergedNode is a node of MergedPaths' tree: an object on the shortest
// paths from the roots to some of the targets (Hop; none for a root set,
// named by Root), how many targets' paths pass through it, and its nodes
// further down. Depth 0 nodes are root sets.
type MergedNode struct {
	Root     string
	Hop      *Hop
	Targets  int
	Children []*MergedNode
}

// MergedPaths merges the shortest paths from the roots to each of
// targets (the kept search's, as Shortest) into a tree: what
// holds many objects of a class at once. Each node's children are sorted
// by how many targets pass through them; a node's targets are at least the
// sum of its children's (the rest are held by it directly). It returns the
// root sets' nodes and how many targets no root reaches.
func (ps *PathSearch) MergedPaths(targets []int) (roots []*MergedNode, unreached int) {
	paths := ps.Shortest(targets)
	byRoot := map[string]*MergedNode{}
	type key struct {
		parent *MergedNode
		obj    int
	}
	nodes := map[key]*MergedNode{}
	for _, t := range targets {
		p, ok := paths[t]
		if !ok {
			unreached++
			continue
		}
		n := byRoot[p.Root]
		if n == nil {
			n = &MergedNode{Root: p.Root}
			byRoot[p.Root] = n
			roots = append(roots, n)
		}
		n.Targets++
		for _, h := range p.Hops[:len(p.Hops)-1] { // the holders, not the target itself
			k := key{n, h.Index}
			c := nodes[k]
			if c == nil {
				hop := h
				c = &MergedNode{Hop: &hop}
				nodes[k] = c
				n.Children = append(n.Children, c)
			}
			c.Targets++
			n = c
		}
	}
	var sortTree func([]*MergedNode)
	sortTree = func(ns []*MergedNode) {
		slices.SortStableFunc(ns, func(a, b *MergedNode) int { return b.Targets - a.Targets })
		for _, n := range ns {
			sortTree(n.Children)
		}
	}
	sortTree(roots)
	return roots, unreached
}
